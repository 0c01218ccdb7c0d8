// The drafter's rounds (see worker/drafter_loop.hpp for the protocol, drafter.hpp for the files).
#include "worker/drafter/drafter.hpp"

#include "hsring/fault.hpp"
#include "hsring/log.hpp"

namespace hsring::worker {

using namespace std::chrono_literals;
using nlohmann::json;

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

std::optional<MetricsFile> master_metrics(const Context& ctx, const Gang& gang) {
    if (!gang.place().is_master()) return std::nullopt;
    return std::optional<MetricsFile>(std::in_place, ctx.env.run_dir / "metrics.jsonl");
}

} // namespace

Drafter::Drafter(Context& ctx, DrafterCompute& compute, Gang& gang)
    : ctx_(ctx), compute_(compute), gang_(gang), positions_(ctx.cfg.drafter.block_size - 1),
      log_(ctx.env.run_dir / fmt::format("train-log.{}.txt", ctx.env.rank)), metrics_(master_metrics(ctx, gang)),
      checkpoints_(ctx, compute, gang, log_), eval_(ctx, gang.place(), positions_, metrics_ ? &*metrics_ : nullptr) {
    const TrainConfig& t = ctx.cfg.train;
    const LedgerInfo& info = ctx.ledger.info();
    lr_ = LrSchedule{t.lr, t.min_lr_ratio, t.warmup_steps, t.max_steps, info.tokens_per_epoch * info.epochs};
    if (!t.max_steps && !lr_.total_tokens)
        log::warn("the ledger does not say how many tokens the run trains: the learning rate stays at its peak "
                  "after warmup (a ledger made by an older hsring; `hsring run --fresh` rebuilds it)");
}

void Drafter::barrier() {
    double one = 1;
    gang_.allreduce_sum({&one, 1});
}

double Drafter::seconds_since_start() const { return std::chrono::duration<double>(Clock::now() - run_start_).count(); }

json Drafter::checkpoint_state() const {
    return {{"step", step_}, {"incarnation", ctx_.env.incarnation}, {"tokens_total", tokens_done_},
            {"warmup_end_tokens", warmup_end_tokens_}, {"samples_total", samples_done_}, {"world", gang_.world()}};
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
    // A finished background write is reported to every rank through this round's sums.
    r.committed = static_cast<double>(checkpoints_.written());
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
    if (checkpoint_now) checkpoints_.take(step, checkpoint_state(), /*wait=*/false);
    const std::uint64_t every = ctx_.cfg.train.eval_every;
    if (eval_.enabled() && every && step % every == 0 && !eval_.active()) eval_.start(step_, false);
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
        if (global.committed > 0) checkpoints_.finish(static_cast<std::uint64_t>(global.committed));
        eval_.add(global, step_, seconds_since_start());
        if (global.slots > 0) apply_step(global, local, stats_ms);
        else compute_.discard_grads();
        const auto world = static_cast<double>(gang_.world());
        if (global.slots == 0 && global.exhausted == world) {
            // Every epoch is trained. With a held-out set, the final weights are evaluated first.
            if (eval_.enabled() && !eval_.final_done()) {
                if (!eval_.final_active()) eval_.start(step_, true);
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
    checkpoints_.take(step_, checkpoint_state(), /*wait=*/true);
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

int run_drafter(Context& ctx, DrafterCompute& compute, Gang& gang) { return Drafter(ctx, compute, gang).run(); }

} // namespace hsring::worker
