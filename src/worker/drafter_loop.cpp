#include "worker/drafter_loop.hpp"

#include "hsring/log.hpp"
#include "hsring/train_log.hpp"
#include "worker/checkpoint_store.hpp"
#include "worker/metrics.hpp"

#include <fmt/format.h>

#include <chrono>
#include <deque>
#include <fstream>
#include <numeric>

namespace hsring::worker {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Sums the per-batch results of one optimizer step.
struct StepTotals {
    double loss_sum = 0, weight_sum = 0, h2d_ms = 0, compute_ms = 0, wait_ms = 0;
    std::vector<double> correct, counted;
    std::uint64_t tokens = 0, samples = 0, batches = 0;
    void add(const BatchResult& r) {
        loss_sum += r.loss_sum;
        weight_sum += r.weight_sum;
        h2d_ms += r.h2d_ms;
        compute_ms += r.compute_ms;
        tokens += r.tokens;
        ++batches;
        if (correct.size() < r.correct.size()) {
            correct.resize(r.correct.size());
            counted.resize(r.counted.size());
        }
        for (std::size_t i = 0; i < r.correct.size(); ++i) {
            correct[i] += r.correct[i];
            counted[i] += r.counted[i];
        }
    }
};

class Drafter {
public:
    Drafter(Context& ctx, DrafterCompute& compute)
        : ctx_(ctx), compute_(compute), store_(ctx.env.run_dir / "checkpoints"),
          log_(ctx.env.run_dir / fmt::format("train-log.{}.txt", ctx.env.rank)),
          metrics_(ctx.env.run_dir / "metrics.jsonl") {}

    int run();

private:
    void restore();
    bool fill_pipeline();
    void train_one_batch();
    void finish_step(std::uint64_t step);
    void checkpoint(std::uint64_t step);
    void write_metrics(std::uint64_t step, const StepTotals& t, const StepResult& r);

    Context& ctx_;
    DrafterCompute& compute_;
    CheckpointStore store_;
    TrainLog log_;
    MetricsFile metrics_;
    WorkerStats stats_;

    std::uint64_t step_ = 0;             // last applied optimizer step
    std::uint64_t checkpointed_ = 0;     // step of the last committed checkpoint
    std::uint64_t assign_step_ = 1;      // the step the next staged batch goes into
    std::uint64_t assign_tokens_ = 0;
    std::deque<std::uint64_t> staged_steps_;  // step of each staged batch, oldest first
    bool accumulating_ = false;          // gradients of step step_+1 are pending
    StepTotals totals_;
    Clock::time_point step_start_ = Clock::now();
    Clock::time_point run_start_ = Clock::now();
    std::uint64_t tokens_total_ = 0;
};

void Drafter::restore() {
    const std::uint64_t s = store_.latest_step();
    if (s) {
        const auto dir = store_.dir_of(s);
        compute_.restore(&dir);
        log::info("resumed from checkpoint step {} ({})", s, dir.string());
    } else {
        compute_.restore(nullptr);
        log::info("no checkpoint: fresh drafter weights");
    }
    step_ = checkpointed_ = s;
    stats_.step = s;  // status shows the restored step, not 0, until the first new one
    assign_step_ = s + 1;
    log_.resume(ctx_.env.incarnation, s);
    // Samples consumed into weights that died with an earlier incarnation are produced again.
    auto rec = ctx_.ledger.recover(ctx_.env.rank, s);
    if (rec.repended || rec.durable)
        log::info("ledger: {} samples of earlier incarnations made durable, {} re-issued", rec.durable, rec.repended);
}

// Stages READY slots up to the in-flight limit. False when nothing is staged and nothing came.
bool Drafter::fill_pipeline() {
    const std::size_t limit = ctx_.cfg.drafter.inflight_slots;
    const std::uint64_t per_step = ctx_.derived.tokens_per_step;
    while (compute_.staged() < limit && !stop_requested()) {
        const bool idle = compute_.staged() == 0;
        auto t0 = Clock::now();
        auto slot = ctx_.ring.acquire(idle ? 200ms : 0ms);
        if (idle) {
            totals_.wait_ms += ms_since(t0);
            stats_.wait_ns += static_cast<std::uint64_t>(ms_since(t0) * 1e6);
        }
        if (!slot) break;
        PackedBatch batch = read_meta(slot->meta());
        std::vector<std::uint8_t> keep(batch.positions.size(), 0);
        std::vector<std::uint64_t> kept;
        std::uint64_t kept_tokens = 0;
        for (std::size_t i = 0; i < batch.positions.size(); ++i) {
            if (ctx_.ledger.consume(batch.positions[i], slot->ticket(), ctx_.env.rank, assign_step_)) {
                keep[i] = 1;
                kept.push_back(batch.positions[i]);
                kept_tokens += batch.lengths[i];
            }
        }
        if (kept.size() < batch.positions.size())
            log::info("slot ticket {}: {} of {} samples were re-issued meanwhile and are skipped", slot->ticket(),
                      batch.positions.size() - kept.size(), batch.positions.size());
        log_.trained(ctx_.env.incarnation, assign_step_, kept);
        totals_.samples += kept.size();
        staged_steps_.push_back(assign_step_);
        compute_.stage(std::move(*slot), std::move(batch), std::move(keep));
        assign_tokens_ += kept_tokens;
        if (assign_tokens_ >= per_step) {
            ++assign_step_;
            assign_tokens_ = 0;
        }
    }
    compute_.poll();
    return compute_.staged() > 0;
}

void Drafter::train_one_batch() {
    const std::uint64_t s = staged_steps_.front();
    staged_steps_.pop_front();
    auto t0 = Clock::now();
    BatchResult r = compute_.train_one();
    stats_.busy_ns += static_cast<std::uint64_t>(ms_since(t0) * 1e6);
    totals_.add(r);
    tokens_total_ += r.tokens;
    stats_.tokens += r.tokens;
    stats_.slots += 1;
    accumulating_ = true;
    // Step s is complete once no staged batch belongs to it and the assigner has moved on.
    const bool complete = staged_steps_.empty() ? assign_step_ > s : staged_steps_.front() != s;
    if (complete) finish_step(s);
}

void Drafter::finish_step(std::uint64_t step) {
    StepResult r = compute_.optimizer_step(step);
    step_ = step;
    accumulating_ = false;
    stats_.step = step;
    stats_.samples += totals_.samples;
    stats_.loss = totals_.weight_sum > 0 ? totals_.loss_sum / totals_.weight_sum : 0;
    if (step % ctx_.cfg.train.log_every == 0) write_metrics(step, totals_, r);
    totals_ = StepTotals{};
    step_start_ = Clock::now();
    if (step % ctx_.cfg.train.checkpoint_every == 0) checkpoint(step);
    ctx_.publish(stats_);
}

void Drafter::write_metrics(std::uint64_t step, const StepTotals& t, const StepResult& r) {
    std::vector<double> acc;
    for (std::size_t i = 0; i < t.correct.size(); ++i) acc.push_back(t.counted[i] > 0 ? t.correct[i] / t.counted[i] : 0.0);
    const double accept = acc.empty() ? 0.0 : expected_accept_length(acc.data(), acc.size());
    stats_.accept_len = accept;
    const double step_ms = ms_since(step_start_);
    const Occupancy o = ctx_.ring.occupancy();
    std::string accs;
    for (double a : acc) accs += fmt::format("{}{:.4f}", accs.empty() ? "" : ",", a);
    metrics_.append(fmt::format(
        "{{\"step\":{},\"time\":{:.3f},\"loss\":{:.6f},\"acc\":[{}],\"accept_len\":{:.4f},\"lr\":{:.6g},"
        "\"grad_norm\":{:.4f},\"tokens\":{},\"tokens_total\":{},\"samples\":{},\"batches\":{},\"step_ms\":{:.2f},"
        "\"tokens_per_s\":{:.1f},\"data_wait_ms\":{:.2f},\"h2d_ms\":{:.2f},\"compute_ms\":{:.2f},"
        "\"ring\":{{\"free\":{},\"writing\":{},\"ready\":{},\"reading\":{}}},\"device_peak_bytes\":{},"
        "\"incarnation\":{}}}",
        step, std::chrono::duration<double>(Clock::now() - run_start_).count(),
        t.weight_sum > 0 ? t.loss_sum / t.weight_sum : 0.0, accs, accept, r.lr, r.grad_norm, t.tokens, tokens_total_,
        t.samples, t.batches, step_ms, step_ms > 0 ? double(t.tokens) / (step_ms / 1000.0) : 0.0, t.wait_ms, t.h2d_ms,
        t.compute_ms, o.free, o.writing, o.ready, o.reading, r.device_peak_bytes, ctx_.env.incarnation));
}

void Drafter::checkpoint(std::uint64_t step) {
    if (step == checkpointed_) return;
    auto t0 = Clock::now();
    log_.sync();  // every sample of steps <= step is on disk before the checkpoint exists
    const auto tmp = store_.begin(step);
    compute_.save(tmp);
    {
        std::ofstream st(tmp / "state.json");
        st << fmt::format("{{\"step\":{},\"incarnation\":{},\"tokens_total\":{}}}\n", step, ctx_.env.incarnation,
                          tokens_total_);
    }
    store_.commit(step, tmp);
    checkpointed_ = step;
    log_.checkpoint(ctx_.env.incarnation, step);
    const std::uint64_t n = ctx_.ledger.make_durable(ctx_.env.rank, step);
    log::info("checkpoint step {} committed in {:.0f} ms ({} samples durable)", step, ms_since(t0), n);
}

int Drafter::run() {
    restore();
    mark_started();
    ctx_.publish(stats_, true);
    const std::uint64_t total = ctx_.ledger.total();
    const std::uint64_t max_steps = ctx_.cfg.train.max_steps;
    bool done = false;
    for (;;) {
        if (max_steps && step_ >= max_steps) {
            // [train] max_steps: the run ends here even if the data has more epochs; batches
            // already staged for later steps are not trained (their steps die with this process,
            // so their samples count as untrained, as in any stop without a checkpoint).
            done = true;
            break;
        }
        const bool have = fill_pipeline();
        if (have) {
            train_one_batch();
            continue;
        }
        if (ctx_.ledger.consumed_or_durable() >= total) {
            done = true;
            break;
        }
        if (stop_requested() || ctx_.ring.stopping()) break;
        ctx_.publish(stats_);
    }
    // Gradients of a partial step go in rather than being lost: every consumed sample is in the
    // final weights.
    if (accumulating_ && !(max_steps && step_ >= max_steps)) finish_step(assign_step_);
    checkpoint(step_);
    if (done) {
        const auto out = ctx_.derived.export_dir;
        compute_.export_model(out);
        ctx_.ledger.set_done();
        log::info("trained every epoch ({} optimizer steps); drafter exported to {}", step_, out.string());
    } else {
        log::info("stopped at step {} (checkpointed)", step_);
    }
    ctx_.publish(stats_, true);
    return kExitOk;
}

} // namespace

int run_drafter(Context& ctx, DrafterCompute& compute) { return Drafter(ctx, compute).run(); }

} // namespace hsring::worker
