#pragma once
// The drafter worker's loop: restore the latest checkpoint, re-issue what died with earlier
// weights, then keep up to [drafter] inflight_slots batches staged (the oldest READY slots,
// copied out and released as soon as their copy completes), train them, step the optimizer
// every [train] tokens_per_step, checkpoint, and finish when every epoch is trained.
#include "worker/context.hpp"
#include "worker/packer.hpp"

#include <cstdint>
#include <filesystem>
#include <vector>

namespace hsring::worker {

struct BatchResult {
    double loss_sum = 0;       // weighted loss summed over counted positions
    double weight_sum = 0;     // total weight (the loss mean is loss_sum / weight_sum)
    std::vector<double> correct, counted;  // per block position 1..B-1
    std::uint64_t tokens = 0;  // context tokens of the batch
    double h2d_ms = 0;         // time the staging copy took (device path)
    double compute_ms = 0;
};

struct StepResult {
    double lr = 0, grad_norm = 0;
    std::uint64_t device_peak_bytes = 0;
};

class DrafterCompute {
public:
    virtual ~DrafterCompute() = default;
    // Loads a committed checkpoint directory, or initialises fresh weights when null.
    virtual void restore(const std::filesystem::path* checkpoint) = 0;
    // Takes the slot: copies its payload (and the batch) into an in-flight buffer and releases
    // the slot as soon as the copy completes (now, or from poll()/train_one()). keep[i] == 0:
    // sample i must not be trained (its ledger entry was re-issued).
    virtual void stage(ReadSlot slot, PackedBatch batch, std::vector<std::uint8_t> keep) = 0;
    virtual std::size_t staged() const = 0;
    // Forward + backward on the oldest staged batch; gradients accumulate until optimizer_step.
    virtual BatchResult train_one() = 0;
    // Applies the accumulated gradients as optimizer step `step` (1-based; sets the LR).
    virtual StepResult optimizer_step(std::uint64_t step) = 0;
    // Writes everything a restart needs into `dir`.
    virtual void save(const std::filesystem::path& dir) = 0;
    // The trained drafter in the format users load (HF directory).
    virtual void export_model(const std::filesystem::path& dir) = 0;
    // Releases slots whose copies have completed.
    virtual void poll() {}
};

int run_drafter(Context& ctx, DrafterCompute& compute);

} // namespace hsring::worker
