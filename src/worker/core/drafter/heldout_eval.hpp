#pragma once
// The drafter gang's held-out evaluation ([data] eval_path, hsring/eval_board.hpp): every
// [train] eval_every steps and once more with the final weights, the gang opens a round (every
// rank at the same step), the targets fill evaluation slots first, each rank evaluates the ones
// it stages (no gradients) and the round's sums travel in the rounds' statistics
// (RoundStats::eval_*). When every held-out sample of every machine is counted once, the master
// writes the round's line to metrics.jsonl.
//
// Thread-safety: the loop thread only.
#include "worker/core/context.hpp"
#include "worker/core/drafter/round_stats.hpp"
#include "hsring/metrics_file.hpp"

#include <cstdint>
#include <vector>

namespace hsring::worker {

class HeldOutEval {
public:
    // metrics: the master's metrics file (null on other ranks).
    HeldOutEval(Context& ctx, const GangPlace& place, std::size_t positions, MetricsFile* metrics);

    // Every machine's held-out samples (0: no [data] eval_path); known once the gang formed.
    void set_total(std::uint64_t n) { total_ = n; }
    bool enabled() const { return total_ > 0; }
    bool active() const { return round_.active; }
    bool final_active() const { return round_.active && round_.final; }
    bool final_done() const { return final_done_; }
    // A round left open by an earlier incarnation is of no use: its sums died with it.
    void close_stale();
    // Collective in the sense of lockstep: every rank calls it after the same optimizer step.
    void start(std::uint64_t step, bool final);
    // Whether a staged evaluation slot of board round `round` counts in the open round (a slot of
    // an older round is dropped: its samples were made for a round that is over).
    bool wants(std::uint32_t round) const;
    // The gang's sums of one round; completes the evaluation round when every sample is in.
    // step_now: the optimizer step the gang is at; time_s: seconds since the run started.
    void add(const RoundStats& g, std::uint64_t step_now, double time_s);

private:
    struct Round {
        bool active = false, final = false;
        std::uint64_t step = 0;  // requested after this optimizer step
        double samples = 0, loss_sum = 0, weight_sum = 0;
        std::vector<double> correct, counted;
    };
    Context& ctx_;
    const GangPlace& place_;
    std::size_t positions_;
    MetricsFile* metrics_;
    std::uint64_t total_ = 0;
    Round round_;
    bool final_done_ = false;
};

} // namespace hsring::worker
