// metrics.jsonl's line per logged optimizer step (the master's; see hsring/metrics_file.hpp).
#include "worker/core/drafter/drafter.hpp"

#include "hsring/acceptance.hpp"
#include "hsring/wall_clock.hpp"

#include <nlohmann/json.hpp>

#include <chrono>

namespace hsring::worker {

using nlohmann::json;

void Drafter::write_metrics(const RoundStats& g, const RoundStats& local, const StepResult& s, double lr, double stats_ms,
                            const char* skipped) {
    std::vector<double> acc;
    for (std::size_t i = 0; i < g.correct.size(); ++i) acc.push_back(g.counted[i] > 0 ? g.correct[i] / g.counted[i] : 0.0);
    const double accept = expected_accept_length(acc.data(), acc.size());
    stats_.accept_len = accept;
    if (!metrics_) return;
    const double step_ms = std::chrono::duration<double, std::milli>(Clock::now() - step_start_).count();
    const Occupancy o = ctx_.ring.occupancy();
    const LedgerInfo& info = ctx_.ledger.info();
    json m = {
        {"step", step_},
        {"time", seconds_since_start()},
        // Wall clock at the step's end: lines it up with other processes' rows (the tau probe's
        // decode windows) on a shared GPU.
        {"unix_time", unix_seconds()},
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
    if (skipped) {
        // Non-finite: nothing changed (weights, moments); the loss / grad_norm above are null (NaN)
        // or what made the step unsafe.
        m["skipped_nonfinite"] = skipped;
        m["skipped_nonfinite_total"] = nonfinite_total_;
    }
    if (const double pause = checkpoints_.take_pause_ms(); pause >= 0) {
        // The checkpoint taken after the previous step paused training this long (inside this step_ms).
        m["checkpoint_pause_ms"] = pause;
    }
    if (gang_.world() > 1) {
        m["rank_data_wait_ms"] = g.wait_ms;
        m["allreduce_ms"] = local.sync_ms;  // gradient sum as the master saw it (exposed, not hidden by backward)
        m["stats_allreduce_ms"] = stats_ms;
    }
    metrics_->append(m);
}

} // namespace hsring::worker
