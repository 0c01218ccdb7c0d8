#pragma once
// What one drafter rank did in one round (one optimizer step), and the same summed over the gang.
// The sum travels as one vector of doubles (one small collective per step): pack() on every rank,
// allreduce_sum, unpack() into the gang's view.
#include "worker/core/drafter_loop.hpp"

#include <cstdint>
#include <vector>

namespace hsring::worker {

struct RoundStats {
    double slots = 0, samples = 0, tokens = 0;  // tokens: of the trained (kept) samples
    double loss_sum = 0, weight_sum = 0;
    double exhausted = 0;     // ranks with no data left (nothing staged, their machine's ledger consumed)
    double stop_run = 0;      // ranks whose machine stops the run (ring stopping)
    double stop_self = 0;     // ranks asked to stop themselves (SIGTERM: hsring restart, supervisor gone)
    double committed = 0;     // the master's background checkpoint committed since the last round (its step), else 0
    double incomplete = 0;    // ranks that could not get their whole share of the step (a stop): nobody applies it
    double nonfinite_inputs = 0;  // slots whose hidden states arrived with a non-finite value
    std::vector<double> correct, counted;  // per block position 1..B-1
    std::vector<double> wait_ms;           // per global rank (each rank fills its own entry)
    // Held-out samples evaluated in this round (the open evaluation round's sums).
    double eval_samples = 0, eval_loss_sum = 0, eval_weight_sum = 0;
    std::vector<double> eval_correct, eval_counted;
    // Local only (not summed).
    double h2d_ms = 0, compute_ms = 0, sync_ms = 0;

    RoundStats(std::size_t positions, std::uint32_t world);

    void add(const BatchResult& r);
    void add_eval(const BatchResult& r, std::size_t n_samples);
    std::vector<double> pack() const;
    void unpack(const std::vector<double>& v);
};

} // namespace hsring::worker
