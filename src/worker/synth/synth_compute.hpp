#pragma once
// [run] mode = "synthetic": the pipeline without models. The target makes each captured layer's
// rows a pattern derived from the batch's samples and hands them to the transport like a real
// target; the drafter stages slots through the transport like a real drafter, recomputes the
// pattern from the slot's metadata, checks every byte that arrived, and "trains" by folding each
// kept sample into a checksum state (sum of mix(machine, position)) that it checkpoints. Data-parallel
// ranks sum their step's contributions over the gang like gradients, so every rank holds the
// same state. After a complete run the state equals the sum over every sample pass exactly once,
// whatever was killed.
//
// On a GPU (opts.cuda: a peer [transport] kind, or HSRING_SYNTH_CUDA=1 with "host") the pattern
// is uploaded to the target's GPU and handed over from there, and the drafter's staging buffers
// are on its GPU: the bytes it checks came through the real device path of the transport.
#include "worker/core/drafter_loop.hpp"
#include "worker/core/target_loop.hpp"
#include "hsring/transport.hpp"

#include <deque>
#include <memory>
#include <optional>

namespace hsring::worker {

// The pattern's 64-bit words for layer `layer` of a batch.
std::uint64_t synth_seed(const PackedBatch& b, std::uint32_t layer);
std::uint64_t synth_mix(std::uint64_t x);

class SynthTarget final : public TargetCompute {
public:
    // hold_ms: keep each slot WRITING that long (tests kill a target mid-write).
    SynthTarget(Ring& ring, const transport::TransportOptions& opts, double hold_ms = 0);
    ~SynthTarget() override;
    std::vector<std::uint8_t> write(const PackedBatch& batch, WriteSlot& slot) override;
    double last_compute_s() const override { return last_s_; }

private:
    RingGeometry g_;
    double last_s_ = 0;
    double hold_ms_;
    bool cuda_;
    std::unique_ptr<transport::SlotWriter> writer_;
    std::vector<std::uint64_t> rows_;  // one layer's pattern
    std::vector<void*> device_rows_;   // GPU: each layer's pattern on the device (alive until finish())
};

class SynthDrafter final : public DrafterCompute {
public:
    // step_ms: simulated compute per batch; hold_ms: keep each slot READING that long;
    // inflight: staging buffers (the loop stages at most [drafter] inflight_slots).
    SynthDrafter(Ring& ring, const transport::TransportOptions& opts, std::uint32_t inflight, distributed::Gang& gang,
                 std::uint32_t node_rank, double step_ms, double hold_ms = 0);
    ~SynthDrafter() override;
    void restore(const std::filesystem::path* checkpoint) override;
    void prepare_replica() override { restore(nullptr); }
    void broadcast_state() override;
    bool receive(ReadSlot& slot) override;
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
        PackedBatch batch;     // what the pattern is made of
        std::uint64_t ticket = 0;
        std::size_t buffer = 0;
        std::unique_ptr<transport::StagedCopy> copy;
    };
    // Waits for the oldest staged copy and checks every byte of it; pops it.
    Staged take_checked();
    double sync_grads_now();
    // A sum mod 2^64 kept as four 16-bit limb sums, so that doubles add it exactly over the gang.
    struct Sum {
        double limbs[4] = {0, 0, 0, 0};
        double count = 0;
        void add(std::uint64_t x);
        std::uint64_t value() const;
    };
    std::size_t free_buffer() const;
    RingGeometry g_;
    bool cuda_;
    std::uint64_t buffer_bytes_;
    std::vector<void*> buffers_;  // staging buffers, the payload's layout (host, or device on a GPU)
    std::vector<bool> busy_;
    std::optional<std::size_t> received_;
    std::vector<std::byte> check_;  // GPU: the arrived rows, back on the host to be checked
    std::unique_ptr<transport::SlotReader> reader_;      // after the buffers: goes first
    distributed::Gang& gang_;
    std::uint32_t node_rank_;
    double step_ms_, hold_ms_;
    std::deque<Staged> staged_;
    std::uint64_t state_sum_ = 0, state_count_ = 0;    // in the (committed) weights
    std::uint64_t state_chain_ = 0;                     // mix over the steps, in order
    Sum accum_;                                         // accumulated, applied at optimizer_step
    bool synced_ = false;
};

} // namespace hsring::worker
