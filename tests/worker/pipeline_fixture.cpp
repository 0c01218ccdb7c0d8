#include "pipeline_fixture.hpp"

#include "hsring/dataset_options.hpp"
#include "hsring/programs.hpp"
#include "hsring/slot_plan.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <thread>

namespace hsring::test {

namespace fs = std::filesystem;

SynthRun::SynthRun(unsigned samples, unsigned epochs, const std::string& extra, const std::string& mode,
                   const std::string& drafter_extra)
    : mode_(mode) {
    dir_ = fs::temp_directory_path() / fmt::format("hsring-synth-{}-{}", ::getpid(), std::rand());
    fs::create_directories(dir_);
    run_dir_ = dir_ / "run";
    fs::create_directories(run_dir_);
    std::mt19937 rng(samples * 7 + epochs);
    {
        std::ofstream data(dir_ / "data.jsonl");
        for (unsigned i = 0; i < samples; ++i) {
            unsigned len = 8 + rng() % 120;
            std::string ids, mask;
            for (unsigned t = 0; t < len; ++t) {
                ids += fmt::format("{}{}", t ? "," : "", rng() % 500);
                mask += fmt::format("{}{}", t ? "," : "", t > len / 3 ? 1 : 0);
            }
            data << "{\"input_ids\": [" << ids << "], \"loss_mask\": [" << mask << "]}\n";
        }
    }
    ring_name_ = fmt::format("hsring-test-synth-{}-{}", ::getpid(), std::rand() % 100000);
    config_file_ = dir_ / "run.toml";
    {
        std::ofstream c(config_file_);
        c << fmt::format(R"([run]
name = "synthtest"
mode = "{}"
seed = 5
[topology]
targets = ["cpu", "cpu"]
drafters = ["cpu"]
[ring]
name = "{}"
slots = 4
slot_tokens = 256
max_samples_per_slot = 16
huge_pages = "off"
[target]
model = "preset:tiny"
[data]
path = "data.jsonl"
epochs = {}
[train]
tokens_per_step = 400
checkpoint_every = 4
)", mode, ring_name_, epochs) << extra << "\n[drafter]\nnum_layers = 1\n" << drafter_extra;
    }
    cfg_ = load_config(config_file_);
    Derived d = derive(cfg_);
    const RingGeometry g = d.ring;
    auto ds = data::Dataset::load(cfg_.resolve(cfg_.data.path), data::dataset_options(cfg_, d));
    // Made for this run (its run tag), as `hsring run` makes them: the workers check it.
    const RunTag tag = RunTag::of(run_dir_.string(), g.layout_hash(), ds.fingerprint(), 0, 1);
    RingOptions ro{ring_name_, g, HugePages::Off, true};
    ro.tag = tag;
    ring_ = std::make_unique<Ring>(Ring::create(ro));
    ledger_name_ = Ledger::name_for_ring(ring_name_);
    LedgerInfo info{ds.fingerprint(), ds.size(), epochs, cfg_.run.seed, cfg_.data.shuffle};
    info.dataset_samples = ds.size();
    info.tokens_per_epoch = ds.total_tokens();
    info.drafter_ranks = static_cast<std::uint32_t>(cfg_.topology.drafters.size());
    // The packer's plan, as `hsring run` makes it.
    const auto plan = plan_slots(ds, cfg_.run.seed, cfg_.data.shuffle, 1, 0, epochs, cfg_.ring.slot_tokens,
                                 d.max_samples_per_slot);
    ledger_ = std::make_unique<Ledger>(Ledger::create(ledger_name_, info, plan, tag));
    status_name_ = StatusBoard::name_for_ring(ring_name_);
    status_ = std::make_unique<StatusBoard>(StatusBoard::create(status_name_, tag));
}

SynthRun::~SynthRun() {
    for (auto& [pid, w] : procs_) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
    }
    ring_.reset();
    ledger_.reset();
    status_.reset();
    Ring::remove(ring_name_);
    Ledger::remove(ledger_name_);
    StatusBoard::remove(status_name_);
    fs::remove_all(dir_);
}

WorkerProc& SynthRun::start(const std::string& role, unsigned rank, const std::map<std::string, std::string>& env) {
    const std::string program =
        locate_program(mode_ == "synthetic" ? "hsring-synth-worker" : "hsring-" + role).string();
    WorkerProc w{role, rank, next_incarnation_++, 0};
    const std::string log = (run_dir_ / fmt::format("{}.{}.log", role, rank)).string();
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::setenv("HSRING_ROLE", role.c_str(), 1);
        ::setenv("HSRING_RANK", std::to_string(rank).c_str(), 1);
        ::setenv("HSRING_INCARNATION", std::to_string(w.incarnation).c_str(), 1);
        ::setenv("HSRING_WORKER_NAME", fmt::format("{}.{}", role, rank).c_str(), 1);
        ::setenv("HSRING_RING", ring_name_.c_str(), 1);
        ::setenv("HSRING_LEDGER", ledger_name_.c_str(), 1);
        for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
        FILE* f = std::freopen(log.c_str(), "a", stderr);
        (void)f;
        ::execl(program.c_str(), program.c_str(), "--config", config_file_.c_str(), "--run-dir",
                run_dir_.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    w.pid = pid;
    return procs_[pid] = w;
}

bool SynthRun::alive(const WorkerProc& w) const { return w.pid > 0 && procs_.count(w.pid); }

int SynthRun::wait(WorkerProc& w, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    int status = 0;
    for (;;) {
        pid_t r = ::waitpid(w.pid, &status, WNOHANG);
        if (r == w.pid) break;
        if (std::chrono::steady_clock::now() > end) {
            ::kill(w.pid, SIGKILL);
            ::waitpid(w.pid, &status, 0);
            status = -1;
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    procs_.erase(w.pid);
    Ledger* l = ledger_.get();
    ring_->reclaim({w.pid, w.incarnation}, [l](std::uint64_t t) { l->repend_ticket(t); });
    w.pid = 0;
    return status;
}

void SynthRun::kill(WorkerProc& w) {
    ::kill(w.pid, SIGKILL);
    wait(w, 10);
}

} // namespace hsring::test
