#pragma once
// [run] mode = "synthetic": the pipeline without models. The target fills each captured
// layer's rows with a pattern derived from the batch's samples; the drafter recomputes the
// pattern from the slot's metadata, checks every byte, and "trains" by folding each kept
// sample into a checksum state (sum of mix(machine, position)) that it checkpoints. Data-parallel
// ranks sum their step's contributions over the gang like gradients, so every rank holds the
// same state. After a complete run the state equals the sum over every sample pass exactly once,
// whatever was killed.
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
    SynthDrafter(const RingGeometry& g, distributed::Gang& gang, std::uint32_t node_rank, double step_ms,
                 double hold_ms = 0)
        : g_(g), gang_(gang), node_rank_(node_rank), step_ms_(step_ms), hold_ms_(hold_ms) {}
    void restore(const std::filesystem::path* checkpoint) override;
    void prepare_replica() override { restore(nullptr); }
    void broadcast_state() override;
    void stage(ReadSlot slot, PackedBatch batch, std::vector<std::uint8_t> keep) override;
    std::size_t staged() const override { return staged_.size(); }
    BatchResult train_one(bool sync_grads) override;
    BatchResult evaluate_one(const std::vector<std::uint64_t>& sample_ids) override;
    bool synced() const override { return synced_; }
    double sync_grads() override;
    StepResult optimizer_step(double lr, double weight_sum) override;
    void discard_grads() override { accum_ = Sum{}; }
    std::unique_ptr<StateSnapshot> snapshot() override;
    void export_model(const std::filesystem::path& dir) override;

    // The contribution of one sample pass (machine, ledger position) to the state.
    static std::uint64_t mix_of(std::uint32_t node_rank, std::uint64_t pos);

private:
    struct Staged {
        std::vector<std::uint64_t> positions;
        std::uint64_t tokens = 0;
    };
    double sync_grads_now();
    // A sum mod 2^64 kept as four 16-bit limb sums, so that doubles add it exactly over the gang.
    struct Sum {
        double limbs[4] = {0, 0, 0, 0};
        double count = 0;
        void add(std::uint64_t x);
        std::uint64_t value() const;
    };
    RingGeometry g_;
    distributed::Gang& gang_;
    std::uint32_t node_rank_;
    double step_ms_, hold_ms_;
    std::deque<Staged> staged_;
    std::uint64_t state_sum_ = 0, state_count_ = 0;    // in the (committed) weights
    Sum accum_;                                         // accumulated, applied at optimizer_step
    bool synced_ = false;
};

} // namespace hsring::worker
