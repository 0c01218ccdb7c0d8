// Supervisor start-up: config, data, run directory, the previous supervisor's leftovers, ring
// and ledger, control socket, run.json (see supervisor.hpp).
#include "supervisor/supervisor.hpp"

#include "hsring/dataset_options.hpp"
#include "hsring/error.hpp"
#include "hsring/fault.hpp"
#include "hsring/programs.hpp"
#include "hsring/run_identity.hpp"
#include "hsring/safe_file.hpp"
#include "hsring/slot_plan.hpp"
#include "supervisor/previous_run.hpp"
#include "supervisor/resume_rules.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>

namespace hsring::supervisor {

namespace fs = std::filesystem;

void Supervisor::start() {
    start_time_ = Clock::now();
    load_config_and_data();
    lock_run_dir();
    take_over_previous();
    // From here on SIGINT/SIGTERM wait in the signalfd for the loop: a Ctrl-C while the ring and
    // the ledger are made (or rebuilt) stops the run once they are complete, never halfway.
    signals_ = std::make_unique<SignalEvents>();
    open_memory();
    control_ = std::make_unique<ControlServer>(files_.control_socket());

    record_ = RunRecord{};
    record_.config = fs::absolute(cfg_.file).string();
    record_.ring = derived_.ring_name;
    record_.ledger = Ledger::name_for_ring(derived_.ring_name);
    record_.samples = samples_;
    record_.epochs = cfg_.data.epochs;
    record_.fingerprint = fingerprint_;
    record_.seed = cfg_.run.seed;
    record_.shuffle = cfg_.data.shuffle;
    record_.nnodes = cfg_.distributed.nnodes;
    record_.node_rank = cfg_.distributed.node_rank;
    record_.drafters = static_cast<std::uint32_t>(cfg_.topology.drafters.size());
    record_.max_steps = cfg_.train.max_steps;
    record_.name = cfg_.run.name;
    record_.master_addr = cfg_.distributed.master_addr;
    record_.master_port = cfg_.distributed.master_port;
    record_.identity = run_identity(cfg_, derived_, fingerprint_, eval_fingerprint_);
    record_.started = iso_time_now();
    record_.supervisor_pid = ::getpid();
    record_.supervisor_start_ticks = process_start_ticks(::getpid());
    write_record();

    console_.info("run '{}': {} targets, {} drafter(s), ring '{}' ({} slots), run dir {}", cfg_.run.name,
                  cfg_.topology.targets.size(), cfg_.topology.drafters.size(), derived_.ring_name,
                  derived_.slots, files_.dir.string());
    if (cfg_.distributed.nnodes > 1 || derived_.world > 1)
        console_.info("machine {} of {} ({}), {} drafter ranks in all, master {}:{}; this machine trains {} of the {} "
                      "samples of each epoch", cfg_.distributed.node_rank, cfg_.distributed.nnodes,
                      cfg_.distributed.node_rank_source, derived_.world, cfg_.distributed.master_addr,
                      cfg_.distributed.master_port, mem_->ledger.info().samples, samples_);
    if (cfg_.transport.kind != TransportKind::Host)
        console_.warn("[transport] kind = \"{}\" is experimental (README: Transports): bit-exact on one H200 "
                      "(target and drafter on one GPU), not yet run between two GPUs over NVLink; kind = \"host\" "
                      "for real runs", to_string(cfg_.transport.kind));
    // A completed run started again finds its ledger rebuilt from the checkpoint with every plan
    // slot in the weights, but without the done mark the drafters set at the end. On one machine
    // the drafter would find nothing to train; on machine 1 of several it would wait for a master
    // that is not coming (it waited timeout_s, then "cannot reach the master").
    if (!mem_->ledger.done() && previous_ && previous_->end && previous_->end->complete && previous_->max_steps == 0) {
        const LedgerCounts c = mem_->ledger.counts();
        if (c.pending == 0 && c.in_slot == 0 && c.consumed == 0) mem_->ledger.set_done();
    }
    if (mem_->ledger.done()) {
        // --fresh alone would not train again: the new ledger takes what the checkpoint holds,
        // which is every epoch. A new run dir has no checkpoint; --fresh frees the ring's name.
        console_.info("the ledger says every epoch is already trained: nothing to do (its checkpoints are in {}; to "
                      "train again from the start: `hsring run --fresh --run-dir NEW_DIR`)", files_.dir.string());
        begin_stop(Phase::Completing, 0, "already complete");
        return;
    }
    for (auto& w : workers_)
        if (w->spec.role == WorkerRole::Target) start_worker(*w);
    start_gang();
}

void Supervisor::load_config_and_data() {
    cfg_ = load_config(opts_.config);
    // HSRING_FAULT=supervisor:... (src/worker/CONTRACT.md). All of it is checked against this
    // machine's workers before anything starts: a misspelled worker or point would never fire.
    fault::configure("supervisor", {static_cast<std::uint32_t>(cfg_.topology.targets.size()),
                                    static_cast<std::uint32_t>(cfg_.topology.drafters.size())});
    apply_launcher_overrides(cfg_, opts_.node_rank ? opts_.node_rank->c_str() : nullptr);
    // --run-dir is [run] run_dir given on the command line: derive() places everything under it
    // (the export among them) as it would from the file.
    if (opts_.run_dir) cfg_.run.run_dir = *opts_.run_dir;
    derived_ = derive(cfg_);
    policy_.emplace(cfg_.supervisor);
    files_.dir = fs::absolute(derived_.run_dir).lexically_normal();
    check_socket_path(files_.control_socket());

    for (const auto& spec : worker_specs(cfg_)) {
        workers_.push_back(std::make_unique<Worker>(spec));
        workers_.back()->program = locate_program(spec.program);
    }
    // A missing or empty file is named by its key ([data] path or eval_path) before either is read.
    check_data_files(cfg_);
    const fs::path data_path = cfg_.resolve(cfg_.data.path);
    console_.info("loading the data set {}", data_path.string());
    const auto ds = data::Dataset::load(data_path, data::dataset_options(cfg_, derived_));
    samples_ = ds.size();
    fingerprint_ = ds.fingerprint();
    tokens_per_epoch_ = ds.total_tokens();
    // The packer's plan of this machine's share: fixed before anything runs (invariant 10, docs/architecture.md).
    const DistributedConfig& dist = cfg_.distributed;
    plan_first_ = plan_slots(ds, cfg_.run.seed, cfg_.data.shuffle, dist.nnodes, dist.node_rank, cfg_.data.epochs,
                             cfg_.ring.slot_tokens, derived_.max_samples_per_slot);
    console_.info("{} samples, {} tokens, fingerprint {:016x}", samples_, ds.total_tokens(), fingerprint_);
    if (const auto positions = derived_.target.max_position_embeddings;
        positions > 0 && ds.max_length() > static_cast<std::size_t>(positions)) {
        std::uint64_t past = 0;
        for (std::size_t i = 0; i < ds.size(); ++i) past += ds.length(i) > static_cast<std::size_t>(positions);
        console_.warn("{} of {} samples of {} are longer than the {} positions {} was made for "
                      "(max_position_embeddings; the longest has {} tokens): its hidden states past them are "
                      "extrapolated, not what it does in use; [data] max_seq_len = {} cuts samples there",
                      past, ds.size(), data_path.string(), positions, derived_.target.source, ds.max_length(),
                      positions);
    }
    if (!cfg_.data.eval_path.empty()) {
        // The held-out set: checked here (FILE:LINE errors before anything starts), evaluated
        // through the ring, never trained.
        const fs::path eval_path = cfg_.resolve(cfg_.data.eval_path);
        console_.info("loading the held-out set {} ([data] eval_path)", eval_path.string());
        const auto es = data::Dataset::load(eval_path, data::dataset_options(cfg_, derived_));
        eval_samples_ = es.size();
        eval_fingerprint_ = es.fingerprint();
        console_.info("{} held-out samples, {} tokens, fingerprint {:016x}: evaluated {}", eval_samples_,
                      es.total_tokens(), eval_fingerprint_,
                      cfg_.train.eval_every ? fmt::format("every {} steps and at the end", cfg_.train.eval_every)
                                            : std::string("at the end"));
    }
}

void Supervisor::lock_run_dir() {
    // A private directory of this user; nothing in it is opened through a link (safe_file.hpp).
    // One this start makes is removed again if the start fails before run.json is written.
    made_run_dir_ = !fs::exists(files_.dir);
    safe::make_private_dir(files_.dir);
    safe::open_dir_beneath(files_.dir, "logs", true);
    lock_fd_ = safe::open_beneath(files_.dir, "supervisor.lock", O_RDWR | O_CREAT, 0600).release();
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK)
            fail("another `hsring run` is using the run directory {} (see `hsring status --run-dir {}`)",
                 files_.dir.string(), files_.dir.string());
        fail("flock {}: {}", files_.lock_file().string(), errno_text(errno));
    }
    // Every worker's log now, before any shared memory or process exists: a link planted at
    // logs/<worker>.log is one start-up error (exit 2) naming it. Opened at a worker's first
    // start instead, it failed like a crash, restarted up to the cap and ended with exit 1.
    for (auto& w : workers_) w->output.open_log(files_.worker_log(w->spec.name));
}

void Supervisor::take_over_previous() {
    if (!fs::exists(files_.run_json())) return;
    try {
        previous_ = read_run_record(files_.run_json());
    } catch (const Error& e) {
        console_.warn("ignoring the previous run record: {}", e.what());
        return;
    }
    check_previous_supervisor(*previous_);
    if (previous_->ring != derived_.ring_name) return;  // another run used this directory before
    wait_for_previous_workers(*previous_, cfg_.supervisor.stop_timeout_s, console_);
}

void Supervisor::check_resume_rules() {
    if (!previous_ || previous_->identity.is_null()) return;  // no run before, or an older hsring's run.json
    const auto step = read_latest_checkpoint(files_);
    if (!step) return;  // nothing trained is kept: any settings will do
    // The data set itself is check_same_data's (its message names samples and fingerprints); a
    // setting that changes the fingerprint (slot_tokens, max_seq_len) is named here as itself.
    nlohmann::json before = previous_->identity, now = run_identity(cfg_, derived_, fingerprint_, eval_fingerprint_);
    before.erase("[data] fingerprint");
    now.erase("[data] fingerprint");
    const ResumeCheck check = check_resume(before, now);
    if (!check.refused.empty()) {
        std::string list;
        for (const auto& r : check.refused) list += fmt::format("{}{}", list.empty() ? "" : "; ", r);
        fail("{} holds the checkpoint of step {}, trained with settings this run changes: {}. Set them back to resume "
             "it (docs/operations-and-reliability.md: what may change between runs), or start over in another run "
             "directory: `hsring run {} --fresh --run-dir NEW_DIR`", files_.dir.string(), *step, list,
             cfg_.file.string());
    }
    for (const auto& c : check.changes) console_.info("changed since the checkpoint of step {}: {}", *step, c);
}

void Supervisor::open_memory() {
    RunMemoryPlan plan;
    plan.ring_name = derived_.ring_name;
    plan.geometry = derived_.ring;
    plan.huge_pages = cfg_.ring.huge_pages;
    const DistributedConfig& dist = cfg_.distributed;
    plan.info = LedgerInfo{fingerprint_, data::shard_size(samples_, dist.nnodes, dist.node_rank), cfg_.data.epochs,
                           cfg_.run.seed, cfg_.data.shuffle, samples_, dist.nnodes, dist.node_rank, tokens_per_epoch_,
                           static_cast<std::uint32_t>(cfg_.topology.drafters.size())};
    plan.plan_first = plan_first_;
    if (plan.info.samples == 0)
        fail("the data set {} has {} samples, fewer than the {} machines of the run ([distributed] nnodes): machine "
             "{} would train nothing", cfg_.resolve(cfg_.data.path).string(), samples_, dist.nnodes, dist.node_rank);
    if (eval_samples_) {
        const std::uint64_t share = data::shard_size(eval_samples_, dist.nnodes, dist.node_rank);
        if (share == 0)
            fail("the held-out set {} has {} samples, fewer than the {} machines of the run: give every machine at "
                 "least one ([data] eval_path)", cfg_.resolve(cfg_.data.eval_path).string(), eval_samples_, dist.nnodes);
        plan.eval = RunMemoryPlan::Eval{share, eval_fingerprint_};
    }
    RunRecord now;
    now.fingerprint = fingerprint_;
    now.samples = samples_;
    now.seed = cfg_.run.seed;
    now.shuffle = cfg_.data.shuffle;
    now.nnodes = dist.nnodes;
    now.node_rank = dist.node_rank;
    check_resume_rules();
    check_same_data(previous_, files_, now);
    plan.fresh = opts_.fresh;
    plan.files = files_;
    plan.tag = RunTag::of(files_.dir.string(), plan.geometry.layout_hash(), fingerprint_, dist.node_rank, dist.nnodes);
    plan.drafters = static_cast<std::uint32_t>(cfg_.topology.drafters.size());
    mem_.emplace(open_run_memory(plan, [this](const std::string& m) { console_.info("{}", m); }));
    // In the owner table as an observer: `--fresh` and `hsring ring rm` of another run see that
    // this ring is in use, also after the supervisor that created it is gone.
    mem_->ring.join(Role::Observer, 0, "supervisor");
    const auto& m = *mem_;
    if (m.ring_created)
        console_.info("created ring '{}' ({}: {} slots of {} bytes, {})", derived_.ring_name, m.ring.region().path,
                      derived_.slots, derived_.slot_stride, m.ring.region().huge_pages ? "huge pages" : "4 KiB pages");
    else {
        const Occupancy o = m.ring.occupancy();
        console_.info("re-attached to ring '{}': {} READY slots kept, {} free", derived_.ring_name, o.ready, o.free);
    }
    if (!m.reclaimed.empty())
        console_.info("reclaimed the slots of dead processes: {} WRITING -> FREE (samples re-issued), {} READING -> READY",
                      m.reclaimed.writing_freed.size(), m.reclaimed.reading_returned.size());
    incarnation_base_ = max_incarnation_seen(previous_, m.ring, m.status);
}

void Supervisor::write_record() { write_run_record(files_, record_); }

} // namespace hsring::supervisor
