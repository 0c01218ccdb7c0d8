#include "worker/core/drafter/heldout_eval.hpp"

#include "hsring/acceptance.hpp"
#include "hsring/log.hpp"

#include <nlohmann/json.hpp>

namespace hsring::worker {

using nlohmann::json;

HeldOutEval::HeldOutEval(Context& ctx, const GangPlace& place, std::size_t positions, MetricsFile* metrics)
    : ctx_(ctx), place_(place), positions_(positions), metrics_(metrics) {}

void HeldOutEval::close_stale() {
    if (ctx_.eval && place_.is_local_leader()) ctx_.eval->close_round();
}

// Every rank at the same round (lockstep): the first drafter of each machine opens the round on
// its machine's evaluation board; the targets then fill held-out slots first.
void HeldOutEval::start(std::uint64_t step, bool final) {
    if (round_.active && place_.is_local_leader()) ctx_.eval->close_round();
    round_ = Round{true, final, step, 0, 0, 0, std::vector<double>(positions_, 0.0), std::vector<double>(positions_, 0.0)};
    if (place_.is_local_leader()) ctx_.eval->open_round();
    log::info("held-out evaluation after step {}{}: {} samples", step, final ? " (the final weights)" : "", total_);
}

bool HeldOutEval::wants(std::uint32_t round) const {
    return ctx_.eval && round_.active && round == ctx_.eval->round();
}

void HeldOutEval::add(const RoundStats& g, std::uint64_t step_now, double time_s) {
    if (!round_.active) return;
    round_.samples += g.eval_samples;
    round_.loss_sum += g.eval_loss_sum;
    round_.weight_sum += g.eval_weight_sum;
    for (std::size_t i = 0; i < positions_; ++i) {
        round_.correct[i] += g.eval_correct[i];
        round_.counted[i] += g.eval_counted[i];
    }
    if (round_.samples < static_cast<double>(total_)) return;
    // Every held-out sample of every machine is in: the round is complete.
    std::vector<double> acc;
    for (std::size_t i = 0; i < positions_; ++i)
        acc.push_back(round_.counted[i] > 0 ? round_.correct[i] / round_.counted[i] : 0.0);
    const double loss = round_.weight_sum > 0 ? round_.loss_sum / round_.weight_sum : 0.0;
    const double accept = expected_accept_length(acc.data(), acc.size());
    if (metrics_) {
        const json m = {{"step", round_.step},
                        {"time", time_s},
                        {"eval", {{"loss", loss}, {"acc", acc}, {"accept_len", accept},
                                  {"samples", static_cast<std::uint64_t>(round_.samples)},
                                  {"completed_at_step", step_now}, {"final", round_.final}}}};
        metrics_->append(m);
    }
    log::info("held-out evaluation after step {}: loss {:.4f}, position-1 accuracy {:.3f}, acceptance estimate {:.3f} "
              "({} samples)", round_.step, loss, acc.empty() ? 0.0 : acc[0], accept, round_.samples);
    if (place_.is_local_leader()) ctx_.eval->close_round();
    if (round_.final) final_done_ = true;
    round_.active = false;
}

} // namespace hsring::worker
