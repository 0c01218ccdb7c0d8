// The drafter's rounds (see worker/core/drafter_loop.hpp for the protocol, drafter.hpp for the files).
#include "worker/core/drafter/drafter.hpp"

#include "hsring/fault.hpp"
#include "hsring/liveness.hpp"
#include "hsring/log.hpp"
#include "hsring/wall_clock.hpp"

#include <time.h>
#include <unistd.h>

#include <cmath>

namespace hsring::worker {

using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// Seconds since this process started (/proc/self/stat's start time against the boot clock).
double process_seconds() {
    const std::uint64_t ticks = process_start_ticks(::getpid());
    timespec now{};
    ::clock_gettime(CLOCK_BOOTTIME, &now);
    const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
    return static_cast<double>(now.tv_sec) + now.tv_nsec / 1e9 - static_cast<double>(ticks) / hz;
}

double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

std::optional<MetricsFile> master_metrics(const Context& ctx, const Gang& gang) {
    if (!gang.place().is_master()) return std::nullopt;
    return std::optional<MetricsFile>(std::in_place, ctx.env.run_dir / "metrics.jsonl", ctx.env.run_dir / "tensorboard");
}

} // namespace

Drafter::Drafter(Context& ctx, DrafterCompute& compute, Gang& gang)
    : ctx_(ctx), compute_(compute), gang_(gang), positions_(ctx.cfg.drafter.block_size - 1),
      log_(train_log_path(ctx.env.run_dir, ctx.env.rank)), metrics_(master_metrics(ctx, gang)),
      checkpoints_(ctx, compute, gang, log_), eval_(ctx, gang.place(), positions_, metrics_ ? &*metrics_ : nullptr),
      plan_{ctx.ledger.plan_slots(), ctx.derived.slots_per_rank, gang.place().local_world} {
    const TrainConfig& t = ctx.cfg.train;
    const LedgerInfo& info = ctx.ledger.info();
    lr_ = LrSchedule{t.lr, t.min_lr_ratio, t.warmup_steps, t.max_steps, info.tokens_per_epoch * info.epochs};
    if (!t.max_steps && !lr_.total_tokens)
        log::warn("the ledger does not say how many tokens the run trains: the learning rate stays at its peak "
                  "after warmup (a ledger made by an older hsring; `hsring run --fresh` rebuilds it)");
}

void Drafter::retime_schedule() {
    if (ctx_.cfg.data.responses != Responses::Target || ctx_.cfg.train.max_steps) return;
    // The target writes the answers: how many tokens the run trains is known only as it goes (the
    // plan counts each answer's room), but its steps are: the plan's, as rebased at the resume
    // (every machine takes part in every step, so the run has the most any machine plans). The
    // cosine follows them. Collective: every rank calls it at its start.
    double steps = static_cast<double>(plan_.steps());
    gang_.allreduce_max({&steps, 1});
    lr_.max_steps = static_cast<std::uint64_t>(steps);
}

void Drafter::barrier() {
    double one = 1;
    gang_.allreduce_sum({&one, 1});
}

double Drafter::seconds_since_start() const { return std::chrono::duration<double>(Clock::now() - run_start_).count(); }

json Drafter::checkpoint_state(bool finished) const {
    return {{"step", step_}, {"incarnation", ctx_.env.incarnation}, {"tokens_total", tokens_done_},
            {"warmup_end_tokens", warmup_end_tokens_}, {"samples_total", samples_done_}, {"world", gang_.world()},
            {"unix_time", unix_seconds()},
            {"finished", finished}};
}

RoundStats Drafter::gather_and_train(std::uint64_t step) {
    RoundStats r(positions_, gang_.world());
    trained_.clear();
    const auto [b, e] = plan_.share(step, ctx_.env.rank);
    const bool gang = gang_.world() > 1;
    bool synced = false;
    if (b == e) {
        // This rank's plan is trained. One look for held-out slots per round (the gang may still
        // evaluate), then the round goes on without it.
        r.exhausted = 1;
        fill_pipeline(r, plan_.slots);
        while (!staged_.empty() && staged_.front().eval()) evaluate_front(r);
    }
    for (std::uint64_t j = b; j < e; ++j) {
        if (!stage_until(j, r)) {
            // A stop came and plan slot j will not be written: the step is not trained by anyone
            // (RoundStats::incomplete); what this rank consumed for it is re-issued at the next start.
            r.incomplete = 1;
            log::info("plan slot {} of step {} is not written and the run stops: step {} is left for the next start",
                      j, step, step);
            break;
        }
        StagedSlot s = std::move(staged_.front());
        staged_.pop_front();
        const bool last = j + 1 == e;
        auto t0 = Clock::now();
        fault::point("train");
        BatchResult res = compute_.train_one(gang && last);
        synced = gang && last && compute_.synced();
        stats_.busy_ns += static_cast<std::uint64_t>(ms_since(t0) * 1e6);
        r.add(res);
        if (!res.finite_input)
            log::warn("plan slot {} (ticket {}) arrived with non-finite hidden states that its target did not report: "
                      "step {} is skipped", j, s.ticket, step);
        r.slots += 1;
        r.samples += static_cast<double>(s.samples);
        r.tokens += static_cast<double>(s.tokens);
        stats_.tokens += s.tokens;
        stats_.samples += s.samples;
        stats_.slots += 1;
        trained_.push_back({j, s.ticket, std::move(s.positions)});
    }
    // Every rank takes part in exactly one gradient sum per round, with or without data.
    if (gang && !synced) r.sync_ms += compute_.sync_grads();
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
    // A step whose loss is not finite is not applied; the optimizer skips one whose gradient norm
    // is not (every rank sees the same sums: every rank decides alike).
    const char* skipped = nullptr;
    StepResult r;
    if (!std::isfinite(g.loss_sum) || g.nonfinite_inputs > 0) {
        compute_.discard_grads();
        r.grad_norm = std::numeric_limits<double>::quiet_NaN();
        skipped = g.nonfinite_inputs > 0 ? "hidden states" : "loss";
    } else {
        r = compute_.optimizer_step(lr, g.weight_sum);
        if (r.skipped) skipped = "gradient norm";
    }
    step_ = step;
    if (step == lr_.warmup_steps) warmup_end_tokens_ = tokens_done_;
    stats_.step = step;
    stats_.loss = g.weight_sum > 0 ? g.loss_sum / g.weight_sum : 0;
    if (skipped) {
        ++nonfinite_run_;
        ++nonfinite_total_;
        std::string mine;
        for (const Trained& t : trained_)
            mine += fmt::format("{}plan slot {} (ticket {}): samples {}", mine.empty() ? "" : "; ", t.plan_slot, t.ticket,
                                id_list(t.positions));
        log::warn("step {} skipped: non-finite {} (loss {}, gradient norm {}); nothing changed. This rank's slots: {}",
                  step, skipped, g.weight_sum > 0 ? g.loss_sum / g.weight_sum : 0.0, r.grad_norm,
                  mine.empty() ? "none" : mine);
    } else {
        nonfinite_run_ = 0;
    }
    if (step % ctx_.cfg.train.log_every == 0 || skipped) write_metrics(g, local, r, lr, stats_ms, skipped);
    step_start_ = Clock::now();
    if (nonfinite_run_ >= ctx_.cfg.train.max_nonfinite_steps) return;  // the loop stops the run
    const bool checkpoint_now = step % ctx_.cfg.train.checkpoint_every == 0 || checkpoints_.delayed();
    ctx_.publish(stats_, checkpoint_now);  // before a checkpoint that may wait: status shows its step
    if (checkpoint_now) checkpoints_.take(step, checkpoint_state(false), /*wait=*/false);
    const std::uint64_t every = ctx_.cfg.train.eval_every;
    if (eval_.enabled() && every && step % every == 0 && !eval_.active()) eval_.start(step_, false);
}

int Drafter::run() {
    if (!restore()) return exit_code::kOk;
    mark_started();
    log::info("started in {:.1f} s since the process began (the next step is the first to train)", process_seconds());
    step_start_ = Clock::now();  // the first step's step_ms counts from here, not from the start
    ctx_.publish(stats_, true);
    const std::uint64_t max_steps = ctx_.cfg.train.max_steps;
    const auto world = static_cast<double>(gang_.world());
    bool done = false, stopped_by_peer = false, run_stops = false;
    for (;;) {
        if (max_steps && step_ >= max_steps) {
            // [train] max_steps: the run ends here even if the data has more epochs; slots staged
            // for later steps are not trained (consumed into later steps, they are re-issued if the
            // run ever goes on).
            done = true;
            break;
        }
        RoundStats local = gather_and_train(step_ + 1);
        RoundStats global = local;
        std::vector<double> v = local.pack();
        const auto t0 = Clock::now();
        gang_.allreduce_sum(v);
        const double stats_ms = ms_since(t0);
        global.unpack(v);
        if (global.committed > 0) checkpoints_.finish(static_cast<std::uint64_t>(global.committed));
        eval_.add(global, step_, seconds_since_start());
        if (global.incomplete > 0 || global.slots == 0) compute_.discard_grads();
        else apply_step(global, local, stats_ms);
        if (nonfinite_run_ >= ctx_.cfg.train.max_nonfinite_steps) {
            checkpoints_.drain();  // a write in flight is of finite weights: keep it
            log::error("training diverged: {} steps in a row (up to step {}) had a non-finite loss or gradient norm "
                       "([train] max_nonfinite_steps = {}); the run stops and keeps its last good checkpoint (step "
                       "{}). Lower [train] lr or raise warmup_steps, check the data and the target; `hsring run` "
                       "resumes from that checkpoint", nonfinite_run_, step_, ctx_.cfg.train.max_nonfinite_steps,
                       checkpoints_.committed());
            ctx_.publish(stats_, true);
            return exit_code::kDiverged;
        }
        // A stop (this machine's ring, a SIGTERM here or on another rank) ends the run after this
        // step: never a short one (an incomplete step is not applied).
        if (global.stop_run > 0 || global.stop_self > 0) {
            stopped_by_peer = local.stop_run == 0 && local.stop_self == 0;
            run_stops = global.stop_run > 0;
            if (stopped_by_peer)
                log::info("another drafter rank stops ({}): checkpointing with the gang",
                          run_stops ? "its machine stops the run" : "it was asked to stop");
            break;
        }
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
        ctx_.publish(stats_);
    }
    // The last step is checkpointed (and waited for): every consumed sample is in the final
    // weights (or re-issued).
    checkpoints_.take(step_, checkpoint_state(done), /*wait=*/true);
    if (done) {
        if (gang_.place().is_master()) {
            const auto out = ctx_.derived.export_dir;
            compute_.export_model(out);
            log::info("trained every epoch ({} optimizer steps{}); drafter exported to {}", step_,
                      nonfinite_total_ ? fmt::format(", {} skipped as non-finite", nonfinite_total_) : std::string(),
                      out.string());
        }
        barrier();  // the export exists before any machine reports its run complete
        if (gang_.place().is_local_leader()) ctx_.ledger.set_done();
        fault::point("done");  // HSRING_FAULT: the run is done, this drafter has not exited yet
        if (!gang_.place().is_master()) log::info("trained every epoch ({} optimizer steps)", step_);
    } else {
        log::info("stopped at step {} (checkpointed)", step_);
    }
    ctx_.publish(stats_, true);
    if (!stopped_by_peer || ctx_.ring.stopping()) return exit_code::kOk;
    return run_stops ? exit_code::kGangStopped : exit_code::kGangRestart;
}

std::string id_list(const std::vector<std::uint64_t>& ids) {
    constexpr std::size_t kShown = 12;
    std::string s;
    for (std::size_t i = 0; i < ids.size() && i < kShown; ++i) s += fmt::format("{}{}", i ? "," : "", ids[i]);
    if (ids.size() > kShown) s += fmt::format(",... ({} in all)", ids.size());
    return s;
}

int run_drafter(Context& ctx, DrafterCompute& compute, Gang& gang) {
    try {
        return Drafter(ctx, compute, gang).run();
    } catch (const NonFiniteState& e) {
        // Nothing non-finite is checkpointed or exported: the last good checkpoint stays.
        log::error("{}", e.what());
        return exit_code::kDiverged;
    }
}

} // namespace hsring::worker
