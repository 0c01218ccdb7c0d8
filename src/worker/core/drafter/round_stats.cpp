#include "worker/core/drafter/round_stats.hpp"

namespace hsring::worker {

RoundStats::RoundStats(std::size_t positions, std::uint32_t world)
    : correct(positions, 0.0), counted(positions, 0.0), wait_ms(world, 0.0), eval_correct(positions, 0.0),
      eval_counted(positions, 0.0) {}

void RoundStats::add(const BatchResult& r) {
    loss_sum += r.loss_sum;
    weight_sum += r.weight_sum;
    h2d_ms += r.h2d_ms;
    compute_ms += r.compute_ms;
    sync_ms += r.sync_ms;
    if (!r.finite_input) nonfinite_inputs += 1;
    for (std::size_t i = 0; i < r.correct.size() && i < correct.size(); ++i) {
        correct[i] += r.correct[i];
        counted[i] += r.counted[i];
    }
}

void RoundStats::add_eval(const BatchResult& r, std::size_t n_samples) {
    eval_samples += static_cast<double>(n_samples);
    eval_loss_sum += r.loss_sum;
    eval_weight_sum += r.weight_sum;
    h2d_ms += r.h2d_ms;
    for (std::size_t i = 0; i < r.correct.size() && i < eval_correct.size(); ++i) {
        eval_correct[i] += r.correct[i];
        eval_counted[i] += r.counted[i];
    }
}

std::vector<double> RoundStats::pack() const {
    std::vector<double> v{slots, samples, tokens, loss_sum, weight_sum, exhausted, stop_run, stop_self, committed,
                          incomplete, nonfinite_inputs, eval_samples, eval_loss_sum, eval_weight_sum};
    for (auto* vec : {&correct, &counted, &wait_ms, &eval_correct, &eval_counted})
        v.insert(v.end(), vec->begin(), vec->end());
    return v;
}

void RoundStats::unpack(const std::vector<double>& v) {
    std::size_t i = 0;
    for (double* f : {&slots, &samples, &tokens, &loss_sum, &weight_sum, &exhausted, &stop_run, &stop_self, &committed,
                      &incomplete, &nonfinite_inputs, &eval_samples, &eval_loss_sum, &eval_weight_sum})
        *f = v[i++];
    for (auto* vec : {&correct, &counted, &wait_ms, &eval_correct, &eval_counted})
        for (double& x : *vec) x = v[i++];
}

} // namespace hsring::worker
