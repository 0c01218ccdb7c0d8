#include "worker/drafter_loop.hpp"

#include "hsring/acceptance.hpp"
#include "hsring/error.hpp"
#include "hsring/fault.hpp"
#include "hsring/log.hpp"
#include "hsring/train_log.hpp"
#include "worker/checkpoint_store.hpp"
#include "worker/checkpoint_writer.hpp"
#include "worker/lr_schedule.hpp"
#include "worker/metrics.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <deque>

namespace hsring::worker {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// What one rank did in one round (one optimizer step), and the same summed over the gang. The
// sum travels as one vector of doubles (one small collective per step); see pack()/unpack().
struct RoundStats {
    double slots = 0, samples = 0, tokens = 0;  // tokens: of the trained (kept) samples
    double loss_sum = 0, weight_sum = 0;
    double exhausted = 0;     // ranks with no data left (nothing staged, their machine's ledger consumed)
    double stop_run = 0;      // ranks whose machine stops the run (ring stopping)
    double stop_self = 0;     // ranks asked to stop themselves (SIGTERM: hsring restart, supervisor gone)
    double committed = 0;     // the master's background checkpoint committed since the last round (its step), else 0
    std::vector<double> correct, counted;  // per block position 1..B-1
    std::vector<double> wait_ms;           // per global rank (each rank fills its own entry)
    // Held-out samples evaluated in this round (the open evaluation round's sums).
    double eval_samples = 0, eval_loss_sum = 0, eval_weight_sum = 0;
    std::vector<double> eval_correct, eval_counted;
    // Local only (not summed).
    double h2d_ms = 0, compute_ms = 0, sync_ms = 0;

    RoundStats(std::size_t positions, std::uint32_t world)
        : correct(positions, 0.0), counted(positions, 0.0), wait_ms(world, 0.0), eval_correct(positions, 0.0),
          eval_counted(positions, 0.0) {}

    void add(const BatchResult& r) {
        loss_sum += r.loss_sum;
        weight_sum += r.weight_sum;
        h2d_ms += r.h2d_ms;
        compute_ms += r.compute_ms;
        sync_ms += r.sync_ms;
        for (std::size_t i = 0; i < r.correct.size() && i < correct.size(); ++i) {
            correct[i] += r.correct[i];
            counted[i] += r.counted[i];
        }
    }
    void add_eval(const BatchResult& r, std::size_t n_samples) {
        eval_samples += static_cast<double>(n_samples);
        eval_loss_sum += r.loss_sum;
        eval_weight_sum += r.weight_sum;
        h2d_ms += r.h2d_ms;
        for (std::size_t i = 0; i < r.correct.size() && i < eval_correct.size(); ++i) {
            eval_correct[i] += r.correct[i];
            eval_counted[i] += r.counted[i];
        }
    }
    std::vector<double> pack() const {
        std::vector<double> v{slots, samples, tokens, loss_sum, weight_sum, exhausted, stop_run, stop_self, committed,
                              eval_samples, eval_loss_sum, eval_weight_sum};
        for (auto* vec : {&correct, &counted, &wait_ms, &eval_correct, &eval_counted})
            v.insert(v.end(), vec->begin(), vec->end());
        return v;
    }
    void unpack(const std::vector<double>& v) {
        std::size_t i = 0;
        for (double* f : {&slots, &samples, &tokens, &loss_sum, &weight_sum, &exhausted, &stop_run, &stop_self,
                          &committed, &eval_samples, &eval_loss_sum, &eval_weight_sum})
            *f = v[i++];
        for (auto* vec : {&correct, &counted, &wait_ms, &eval_correct, &eval_counted})
            for (double& x : *vec) x = v[i++];
    }
};

// A staged slot as the loop sees it (the compute holds the data, in the same order).
struct StagedSlot {
    std::uint64_t step = 0;     // the optimizer step it trains in
    std::uint64_t samples = 0;  // kept (trained, or evaluated) samples
    std::uint64_t tokens = 0;   // their tokens
    bool eval = false;          // a held-out slot: evaluated, not trained
    std::vector<std::uint64_t> eval_ids;  // its samples' indices in the held-out set
};

// The open evaluation round's sums over the gang.
struct EvalRound {
    bool active = false, final = false;
    std::uint64_t step = 0;     // requested after this optimizer step
    double samples = 0, loss_sum = 0, weight_sum = 0;
    std::vector<double> correct, counted;
};

class Drafter {
public:
    Drafter(Context& ctx, DrafterCompute& compute, Gang& gang)
        : ctx_(ctx), compute_(compute), gang_(gang), positions_(ctx.cfg.drafter.block_size - 1),
          store_(ctx.env.run_dir / "checkpoints"),
          log_(ctx.env.run_dir / fmt::format("train-log.{}.txt", ctx.env.rank)) {
        const TrainConfig& t = ctx.cfg.train;
        const LedgerInfo& info = ctx.ledger.info();
        lr_ = LrSchedule{t.lr, t.min_lr_ratio, t.warmup_steps, t.max_steps, info.tokens_per_epoch * info.epochs};
        if (!t.max_steps && !lr_.total_tokens)
            log::warn("the ledger does not say how many tokens the run trains: the learning rate stays at its peak "
                      "after warmup (a ledger made by an older hsring; `hsring run --fresh` rebuilds it)");
        if (gang_.place().is_master()) metrics_.emplace(ctx.env.run_dir / "metrics.jsonl");
    }

    int run();

private:
    void restore();
    RoundStats gather_and_train();
    bool next_training_batch(RoundStats& r);
    void fill_pipeline(RoundStats& r);
    bool exhausted() const;
    void apply_step(const RoundStats& g, const RoundStats& local, double stats_ms);
    void write_metrics(const RoundStats& g, const RoundStats& local, const StepResult& s, double lr, double stats_ms);
    void checkpoint(std::uint64_t step, bool wait = false);
    void drain_checkpoint();
    void finish_checkpoint(std::uint64_t step);
    void barrier();
    void evaluate_front(RoundStats& r);
    void start_eval(bool final);
    void add_eval(const RoundStats& g);

    Context& ctx_;
    DrafterCompute& compute_;
    Gang& gang_;
    const std::size_t positions_;
    CheckpointStore store_;
    TrainLog log_;
    std::optional<MetricsFile> metrics_;  // the master's
    LrSchedule lr_;
    WorkerStats stats_;

    std::uint64_t step_ = 0;              // last applied optimizer step
    std::uint64_t checkpointed_ = 0;      // step of the last committed checkpoint
    std::uint64_t pending_ = 0;           // step of a checkpoint written in the background (> checkpointed_ while so)
    CheckpointWriter writer_;             // the master's background writes
    std::atomic<double> written_ms_{0};   // how long the last background write took (writer thread)
    double pause_ms_ = -1;                // how long the last checkpoint paused training; -1: reported
    std::uint64_t tokens_done_ = 0;       // trained tokens of the whole gang up to step_
    std::uint64_t samples_done_ = 0;
    std::uint64_t warmup_end_tokens_ = 0; // tokens_done_ at the end of warmup
    std::uint64_t assign_step_ = 1;       // the step the next staged slot trains in
    std::uint32_t assigned_ = 0;          // slots already assigned to assign_step_
    std::deque<StagedSlot> staged_;
    bool gang_stopping_ = false;          // another rank stops: take no new slots
    std::uint64_t eval_total_ = 0;        // held-out samples of every machine (0 = no [data] eval_path)
    EvalRound eval_;
    bool final_eval_done_ = false;
    Clock::time_point step_start_ = Clock::now();
    Clock::time_point run_start_ = Clock::now();
};

void Drafter::barrier() {
    double one = 1;
    gang_.allreduce_sum({&one, 1});
}

void Drafter::restore() {
    // Resume from the oldest of the machines' latest checkpoints: the master keeps the last two,
    // and a machine that died between the master's commit and its own marker is one behind.
    const std::uint64_t mine = store_.latest_step();
    double v = -static_cast<double>(mine);
    gang_.allreduce_max({&v, 1});
    fault::point("restore");  // HSRING_FAULT: the gang formed, the state not yet sent
    const auto s = static_cast<std::uint64_t>(-v);
    // tokens_done, warmup_end_tokens, samples_done (from the master), held-out samples (each machine's)
    double state[4] = {0, 0, 0, 0};
    if (gang_.place().is_master()) {
        if (s) {
            const auto dir = store_.dir_of(s);
            if (!std::filesystem::is_directory(dir / "drafter") && ctx_.cfg.run.mode == RunMode::Train)
                fail("the gang resumes from step {} (the oldest latest checkpoint of its machines), but {} holds no "
                     "weights of that step: the master's run directory lost them", s, dir.string());
            compute_.restore(&dir);
            const json st = json::parse(store_.read_file(s, "state.json").value_or(""), nullptr, false);
            if (st.is_object()) {
                state[0] = st.value("tokens_total", 0.0);
                state[1] = st.value("warmup_end_tokens", 0.0);
                state[2] = st.value("samples_total", 0.0);
            }
            log::info("resumed from checkpoint step {} ({})", s, dir.string());
        } else {
            compute_.restore(nullptr);
            log::info("no checkpoint: fresh drafter weights");
        }
    } else {
        compute_.prepare_replica();
    }
    if (ctx_.eval && gang_.place().is_local_leader()) state[3] = static_cast<double>(ctx_.eval->samples());
    if (gang_.world() > 1) {
        compute_.broadcast_state();
        gang_.allreduce_sum(state);  // the others contributed zeros
        log::info("drafter rank {} of {} (machine {}, local rank {}): state of step {} received from the master",
                  gang_.rank(), gang_.world(), gang_.place().node_rank, gang_.place().local_rank, s);
    }
    tokens_done_ = static_cast<std::uint64_t>(state[0]);
    warmup_end_tokens_ = static_cast<std::uint64_t>(state[1]);
    samples_done_ = static_cast<std::uint64_t>(state[2]);
    eval_total_ = static_cast<std::uint64_t>(state[3]);
    // A round left open by an earlier incarnation is of no use: its sums died with it.
    if (ctx_.eval && gang_.place().is_local_leader()) ctx_.eval->close_round();
    step_ = checkpointed_ = s;
    stats_.step = s;  // status shows the restored step, not 0, until the first new one
    assign_step_ = s + 1;
    log_.resume(ctx_.env.incarnation, s);
    // Samples consumed into weights that are not the ones resumed from are produced again.
    auto rec = ctx_.ledger.recover(ctx_.env.rank, s);
    if (rec.repended || rec.durable)
        log::info("ledger: {} samples of earlier incarnations made durable, {} re-issued", rec.durable, rec.repended);
}

bool Drafter::exhausted() const {
    return compute_.staged() == 0 && ctx_.ledger.consumed_or_durable() >= ctx_.ledger.total();
}

// Stages READY slots up to the in-flight limit; waits (a little) only when nothing is staged.
void Drafter::fill_pipeline(RoundStats& r) {
    const std::size_t limit = ctx_.cfg.drafter.inflight_slots;
    const bool local_stop = ctx_.ring.stopping();
    while (compute_.staged() < limit && !stop_requested() && (!gang_stopping_ || local_stop)) {
        const bool idle = compute_.staged() == 0;
        auto t0 = Clock::now();
        auto slot = ctx_.ring.acquire(idle && !local_stop ? 200ms : 0ms);
        if (idle) {
            const double waited = ms_since(t0);
            r.wait_ms[gang_.rank()] += waited;
            stats_.wait_ns += static_cast<std::uint64_t>(waited * 1e6);
        }
        if (!slot) break;
        PackedBatch batch = read_meta(slot->meta());
        if (batch.eval_round > 0) {
            // Held-out samples: only those of the round the gang evaluates now count (a slot of an
            // older round is dropped; its samples were made for a round that is over).
            if (!ctx_.eval || !eval_.active || batch.eval_round != ctx_.eval->round()) {
                // (A slot of the current round that arrives before this rank opened its side of
                // the round goes back to its samples, so the round can still complete.)
                if (ctx_.eval) ctx_.eval->repend_ticket(slot->ticket());
                slot->release();
                continue;
            }
            if (!compute_.receive(*slot)) continue;  // its bytes died with their target: samples re-issued
            StagedSlot info{0, 0, 0, true, {}};
            std::vector<std::uint8_t> keep(batch.positions.size(), 0);
            const GangPlace& p = ctx_.env.gang;
            for (std::size_t i = 0; i < batch.positions.size(); ++i) {
                keep[i] = ctx_.eval->done(batch.positions[i], batch.eval_round, slot->ticket()) ? 1 : 0;
                info.samples += keep[i];
                info.eval_ids.push_back(p.node_rank + batch.positions[i] * p.nnodes);
            }
            staged_.push_back(std::move(info));
            compute_.stage(std::move(*slot), std::move(batch), std::move(keep));
            continue;
        }
        if (!compute_.receive(*slot)) continue;  // its bytes died with their target: samples re-issued
        std::vector<std::uint8_t> keep(batch.positions.size(), 0);
        std::vector<std::uint64_t> kept;
        StagedSlot info{assign_step_, 0, 0, false, {}};
        for (std::size_t i = 0; i < batch.positions.size(); ++i) {
            if (ctx_.ledger.consume(batch.positions[i], slot->ticket(), ctx_.env.rank, assign_step_)) {
                keep[i] = 1;
                kept.push_back(batch.positions[i]);
                info.tokens += batch.lengths[i];
            }
        }
        info.samples = kept.size();
        if (kept.size() < batch.positions.size())
            log::info("slot ticket {}: {} of {} samples were re-issued meanwhile and are skipped", slot->ticket(),
                      batch.positions.size() - kept.size(), batch.positions.size());
        log_.trained(ctx_.env.incarnation, assign_step_, kept);
        staged_.push_back(info);
        fault::point("stage");  // HSRING_FAULT (CONTRACT.md): the slot is READING, its samples consumed
        compute_.stage(std::move(*slot), std::move(batch), std::move(keep));
        if (++assigned_ == ctx_.derived.slots_per_rank) {
            ++assign_step_;
            assigned_ = 0;
        }
    }
    compute_.poll();
}

// True when the oldest staged slot is a training slot of this step; false when this rank gets
// no more slots in this round (no data left on its machine, or a stop).
bool Drafter::next_training_batch(RoundStats& r) {
    for (;;) {
        fill_pipeline(r);
        while (!staged_.empty() && staged_.front().eval) evaluate_front(r);
        if (!staged_.empty()) return true;
        if (eval_.active && exhausted()) return false;  // one look for held-out slots per round
        if (exhausted() || stop_requested() || gang_stopping_) return false;
        if (ctx_.ring.stopping()) return false;  // drained: nothing READY is left
        ctx_.publish(stats_);
    }
}

void Drafter::evaluate_front(RoundStats& r) {
    const StagedSlot s = std::move(staged_.front());
    staged_.pop_front();
    const BatchResult b = compute_.evaluate_one(s.eval_ids);
    r.add_eval(b, s.samples);
}

// Every rank at the same round (lockstep): the first drafter of each machine opens the round on
// its machine's evaluation board; the targets then fill held-out slots first.
void Drafter::start_eval(bool final) {
    if (eval_.active && gang_.place().is_local_leader()) ctx_.eval->close_round();
    eval_ = EvalRound{true, final, step_, 0, 0, 0, std::vector<double>(positions_, 0.0),
                      std::vector<double>(positions_, 0.0)};
    if (gang_.place().is_local_leader()) ctx_.eval->open_round();
    log::info("held-out evaluation after step {}{}: {} samples", step_, final ? " (the final weights)" : "", eval_total_);
}

void Drafter::add_eval(const RoundStats& g) {
    if (!eval_.active) return;
    eval_.samples += g.eval_samples;
    eval_.loss_sum += g.eval_loss_sum;
    eval_.weight_sum += g.eval_weight_sum;
    for (std::size_t i = 0; i < positions_; ++i) {
        eval_.correct[i] += g.eval_correct[i];
        eval_.counted[i] += g.eval_counted[i];
    }
    if (eval_.samples < static_cast<double>(eval_total_)) return;
    // Every held-out sample of every machine is in: the round is complete.
    std::vector<double> acc;
    for (std::size_t i = 0; i < positions_; ++i) acc.push_back(eval_.counted[i] > 0 ? eval_.correct[i] / eval_.counted[i] : 0.0);
    const double loss = eval_.weight_sum > 0 ? eval_.loss_sum / eval_.weight_sum : 0.0;
    const double accept = expected_accept_length(acc.data(), acc.size());
    if (metrics_) {
        const json m = {{"step", eval_.step},
                        {"time", std::chrono::duration<double>(Clock::now() - run_start_).count()},
                        {"eval", {{"loss", loss}, {"acc", acc}, {"accept_len", accept},
                                  {"samples", static_cast<std::uint64_t>(eval_.samples)},
                                  {"completed_at_step", step_}, {"final", eval_.final}}}};
        metrics_->append(m.dump());
    }
    log::info("held-out evaluation after step {}: loss {:.4f}, position-1 accuracy {:.3f}, acceptance estimate {:.3f} "
              "({} samples)", eval_.step, loss, acc.empty() ? 0.0 : acc[0], accept, eval_.samples);
    if (gang_.place().is_local_leader()) ctx_.eval->close_round();
    if (eval_.final) final_eval_done_ = true;
    eval_.active = false;
}

RoundStats Drafter::gather_and_train() {
    RoundStats r(positions_, gang_.world());
    const std::uint32_t quota = ctx_.derived.slots_per_rank;
    const bool gang = gang_.world() > 1;
    bool synced = false;
    while (r.slots < quota && next_training_batch(r)) {
        const StagedSlot s = staged_.front();
        staged_.pop_front();
        const bool last = r.slots + 1 == quota;
        auto t0 = Clock::now();
        fault::point("train");
        BatchResult b = compute_.train_one(gang && last);
        synced = gang && last && compute_.synced();
        stats_.busy_ns += static_cast<std::uint64_t>(ms_since(t0) * 1e6);
        r.add(b);
        r.slots += 1;
        r.samples += static_cast<double>(s.samples);
        r.tokens += static_cast<double>(s.tokens);
        stats_.tokens += s.tokens;
        stats_.samples += s.samples;
        stats_.slots += 1;
    }
    // Every rank takes part in exactly one gradient sum per round, with or without data.
    if (gang && !synced) r.sync_ms += compute_.sync_grads();
    r.exhausted = exhausted() ? 1 : 0;
    r.stop_run = ctx_.ring.stopping() ? 1 : 0;
    r.stop_self = stop_requested() ? 1 : 0;
    // A finished background write is reported to every rank through this round's sums (wait()
    // rethrows a failed write here: the master exits and the gang restarts from the last commit).
    if (gang_.place().is_master() && writer_.step() && writer_.done()) r.committed = static_cast<double>(writer_.wait());
    return r;
}

void Drafter::apply_step(const RoundStats& g, const RoundStats& local, double stats_ms) {
    const std::uint64_t step = step_ + 1;
    tokens_done_ += static_cast<std::uint64_t>(g.tokens);
    samples_done_ += static_cast<std::uint64_t>(g.samples);
    const double lr = lr_.at(step, tokens_done_, warmup_end_tokens_);
    const StepResult r = compute_.optimizer_step(lr, g.weight_sum);
    step_ = step;
    if (step == lr_.warmup_steps) warmup_end_tokens_ = tokens_done_;
    stats_.step = step;
    stats_.loss = g.weight_sum > 0 ? g.loss_sum / g.weight_sum : 0;
    if (step % ctx_.cfg.train.log_every == 0) write_metrics(g, local, r, lr, stats_ms);
    step_start_ = Clock::now();
    const bool checkpoint_now = step % ctx_.cfg.train.checkpoint_every == 0;
    ctx_.publish(stats_, checkpoint_now);  // before a checkpoint that may wait: status shows its step
    if (checkpoint_now) checkpoint(step);
    const std::uint64_t every = ctx_.cfg.train.eval_every;
    if (eval_total_ && every && step % every == 0 && !eval_.active) start_eval(false);
}

void Drafter::write_metrics(const RoundStats& g, const RoundStats& local, const StepResult& s, double lr, double stats_ms) {
    std::vector<double> acc;
    for (std::size_t i = 0; i < g.correct.size(); ++i) acc.push_back(g.counted[i] > 0 ? g.correct[i] / g.counted[i] : 0.0);
    const double accept = expected_accept_length(acc.data(), acc.size());
    stats_.accept_len = accept;
    if (!metrics_) return;
    const double step_ms = ms_since(step_start_);
    const Occupancy o = ctx_.ring.occupancy();
    const LedgerInfo& info = ctx_.ledger.info();
    json m = {
        {"step", step_},
        {"time", std::chrono::duration<double>(Clock::now() - run_start_).count()},
        {"loss", g.weight_sum > 0 ? g.loss_sum / g.weight_sum : 0.0},
        {"acc", acc},
        {"accept_len", accept},
        {"lr", lr},
        {"lr_progress", lr_.progress(step_, tokens_done_, warmup_end_tokens_)},
        {"grad_norm", s.grad_norm},
        {"tokens", g.tokens},
        {"tokens_total", tokens_done_},
        {"samples", g.samples},
        {"samples_total", samples_done_},
        {"slots", g.slots},
        {"epoch", info.tokens_per_epoch ? double(tokens_done_) / double(info.tokens_per_epoch) : 0.0},
        {"step_ms", step_ms},
        {"tokens_per_s", step_ms > 0 ? g.tokens / (step_ms / 1000.0) : 0.0},
        {"data_wait_ms", local.wait_ms[gang_.rank()]},
        {"h2d_ms", local.h2d_ms},
        {"compute_ms", local.compute_ms},
        {"ring", {{"free", o.free}, {"writing", o.writing}, {"ready", o.ready}, {"reading", o.reading}}},
        {"device_peak_bytes", s.device_peak_bytes},
        {"incarnation", ctx_.env.incarnation},
        {"world", gang_.world()},
    };
    if (pause_ms_ >= 0) {
        // The checkpoint taken after the previous step paused training this long (inside this step_ms).
        m["checkpoint_pause_ms"] = pause_ms_;
        pause_ms_ = -1;
    }
    if (gang_.world() > 1) {
        m["rank_data_wait_ms"] = g.wait_ms;
        m["allreduce_ms"] = local.sync_ms;  // gradient sum as the master saw it (exposed, not hidden by backward)
        m["stats_allreduce_ms"] = stats_ms;
    }
    metrics_->append(m.dump());
}

void Drafter::checkpoint(std::uint64_t step, bool wait) {
    const auto t0 = Clock::now();  // the pause includes waiting for a write still in flight
    drain_checkpoint();            // one write at a time: the one in flight is committed first
    if (step == checkpointed_) return;
    // Exactly once (DESIGN.md invariant 4): every rank's train records of steps <= step are on
    // disk before the checkpoint exists; samples turn durable only after it exists.
    log_.sync();
    barrier();
    const bool background = ctx_.cfg.train.checkpoint_background && !wait;
    if (gang_.place().is_master()) {
        // The state is copied out now; the job only touches that copy and the store (the loop
        // thread uses the store on the master only here and in restore).
        std::shared_ptr<StateSnapshot> snap = compute_.snapshot();
        const json st = {{"step", step}, {"incarnation", ctx_.env.incarnation}, {"tokens_total", tokens_done_},
                         {"warmup_end_tokens", warmup_end_tokens_}, {"samples_total", samples_done_},
                         {"world", gang_.world()}};
        auto job = [this, step, snap, text = st.dump() + "\n"] {
            const auto w0 = Clock::now();
            const auto tmp = store_.begin(step);
            snap->write(tmp);
            store_.write_file(tmp, "state.json", text);
            fault::point("checkpoint");  // written, not committed
            store_.commit(step, tmp);
            written_ms_.store(ms_since(w0));
        };
        if (background) writer_.start(step, std::move(job));
        else job();
    }
    if (background) {
        // Every rank: the commit is reported by a later round (RoundStats::committed) or drained.
        pending_ = step;
        pause_ms_ = ms_since(t0);
        log::info("checkpoint step {}: state copied in {:.0f} ms, written in the background while training goes on",
                  step, pause_ms_);
        return;
    }
    barrier();
    finish_checkpoint(step);
    pause_ms_ = ms_since(t0);
    log::info("checkpoint step {} written and committed in {:.0f} ms (training paused)", step, pause_ms_);
}

void Drafter::drain_checkpoint() {
    if (pending_ <= checkpointed_) return;
    // Collective, like checkpoint(): every rank knows pending_ (they all took that checkpoint).
    if (gang_.place().is_master()) writer_.wait();  // rethrows a failed write
    barrier();
    finish_checkpoint(pending_);
}

void Drafter::finish_checkpoint(std::uint64_t step) {
    const GangPlace& p = gang_.place();
    if (p.is_local_leader() && p.node_rank != 0) {
        // The other machines record that the master committed `step` (the weights stay with the
        // master); their supervisors rebuild a lost ledger from it and their train logs.
        const auto tmp = store_.begin(step);
        const json st = {{"step", step}, {"marker", true}, {"weights", "on machine 0 (the master)"}};
        store_.write_file(tmp, "state.json", st.dump() + "\n");
        store_.commit(step, tmp);
    }
    fault::point("commit");  // committed; the train log's K record and the durable marks not yet
    checkpointed_ = step;
    log_.checkpoint(ctx_.env.incarnation, step);
    const std::uint64_t n = ctx_.ledger.make_durable(ctx_.env.rank, step);
    if (pending_ == step)
        log::info("checkpoint step {} committed (written in {:.0f} ms in the background; {} samples durable)", step,
                  written_ms_.load(), n);
    else
        log::info("checkpoint step {} committed ({} samples durable)", step, n);
    pending_ = 0;
}

int Drafter::run() {
    restore();
    mark_started();
    ctx_.publish(stats_, true);
    const std::uint64_t max_steps = ctx_.cfg.train.max_steps;
    bool done = false, stopped_by_peer = false, run_stops = false;
    for (;;) {
        if (max_steps && step_ >= max_steps) {
            // [train] max_steps: the run ends here even if the data has more epochs; batches
            // already staged for later steps are not trained (their steps die with this process,
            // so their samples count as untrained, as in any stop without a checkpoint).
            done = true;
            break;
        }
        RoundStats local = gather_and_train();
        RoundStats global = local;
        std::vector<double> v = local.pack();
        const auto t0 = Clock::now();
        gang_.allreduce_sum(v);
        const double stats_ms = ms_since(t0);
        global.unpack(v);
        if (global.committed > 0) finish_checkpoint(static_cast<std::uint64_t>(global.committed));
        add_eval(global);
        if (global.slots > 0) apply_step(global, local, stats_ms);
        else compute_.discard_grads();
        const auto world = static_cast<double>(gang_.world());
        if (global.slots == 0 && global.exhausted == world) {
            // Every epoch is trained. With a held-out set, the final weights are evaluated first.
            if (eval_total_ && !final_eval_done_) {
                if (!eval_.active || !eval_.final) start_eval(true);
                ctx_.publish(stats_);
                continue;
            }
            done = true;
            break;
        }
        const bool stopping = global.stop_run > 0 || global.stop_self > 0;
        if (stopping && !gang_stopping_) {
            gang_stopping_ = true;  // no new slots from here on; drain what is staged (and READY, locally stopping)
            if (local.stop_run == 0 && local.stop_self == 0)
                log::info("another drafter rank stops ({}): finishing the staged slots and checkpointing",
                          global.stop_run > 0 ? "its machine stops the run" : "it was asked to stop");
        }
        if (gang_stopping_ && global.slots == 0) {
            stopped_by_peer = local.stop_run == 0 && local.stop_self == 0;
            run_stops = global.stop_run > 0;
            break;
        }
        ctx_.publish(stats_);
    }
    // The last step is checkpointed (and waited for): every consumed sample is in the final
    // weights (or re-issued).
    checkpoint(step_, /*wait=*/true);
    if (done) {
        if (gang_.place().is_master()) {
            const auto out = ctx_.derived.export_dir;
            compute_.export_model(out);
            log::info("trained every epoch ({} optimizer steps); drafter exported to {}", step_, out.string());
        }
        barrier();  // the export exists before any machine reports its run complete
        if (gang_.place().is_local_leader()) ctx_.ledger.set_done();
        if (!gang_.place().is_master()) log::info("trained every epoch ({} optimizer steps)", step_);
    } else {
        log::info("stopped at step {} (checkpointed)", step_);
    }
    ctx_.publish(stats_, true);
    if (!stopped_by_peer || ctx_.ring.stopping()) return exit_code::kOk;
    return run_stops ? exit_code::kGangStopped : exit_code::kGangRestart;
}

} // namespace

int run_drafter(Context& ctx, DrafterCompute& compute, Gang& gang) { return Drafter(ctx, compute, gang).run(); }

} // namespace hsring::worker
