#pragma once
// [run] mode = "synthetic": the pipeline without models. The target fills each captured
// layer's rows with a pattern derived from the batch's samples; the drafter recomputes the
// pattern from the slot's metadata, checks every byte, and "trains" by folding each kept
// sample into a checksum state (sum of mix(position)) that it checkpoints. After a complete
// run the state equals the sum over every position exactly once, whatever was killed.
#include "worker/drafter_loop.hpp"
#include "worker/target_loop.hpp"

#include <deque>

namespace hsring::worker {

// The pattern's 64-bit words for layer `layer` of a batch.
std::uint64_t synth_seed(const PackedBatch& b, std::uint32_t layer);
std::uint64_t synth_mix(std::uint64_t x);

class SynthTarget final : public TargetCompute {
public:
    // hold_ms: keep each slot WRITING that long (tests kill a target mid-write).
    explicit SynthTarget(const RingGeometry& g, double hold_ms = 0) : g_(g), hold_ms_(hold_ms) {}
    void write(const PackedBatch& batch, WriteSlot& slot) override;

private:
    RingGeometry g_;
    double hold_ms_;
};

class SynthDrafter final : public DrafterCompute {
public:
    // step_ms: simulated compute per batch; hold_ms: keep each slot READING that long.
    SynthDrafter(const RingGeometry& g, double step_ms, double hold_ms = 0) : g_(g), step_ms_(step_ms), hold_ms_(hold_ms) {}
    void restore(const std::filesystem::path* checkpoint) override;
    void stage(ReadSlot slot, PackedBatch batch, std::vector<std::uint8_t> keep) override;
    std::size_t staged() const override { return staged_.size(); }
    BatchResult train_one() override;
    StepResult optimizer_step(std::uint64_t step) override;
    void save(const std::filesystem::path& dir) override;
    void export_model(const std::filesystem::path& dir) override;

private:
    struct Staged {
        std::vector<std::uint64_t> positions;
        std::uint64_t tokens = 0;
    };
    RingGeometry g_;
    double step_ms_, hold_ms_;
    std::deque<Staged> staged_;
    std::uint64_t state_sum_ = 0, state_count_ = 0;    // in the (committed) weights
    std::uint64_t accum_sum_ = 0, accum_count_ = 0;    // accumulated, applied at optimizer_step
};

} // namespace hsring::worker
