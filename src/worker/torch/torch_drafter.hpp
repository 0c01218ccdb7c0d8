#pragma once
// The real drafter compute: a DFlash drafter trained with AdamW on the captured hidden states.
//
// Staging (invariant 1, docs/architecture.md): at most [drafter] inflight_slots device buffers, each the
// size of one slot's payload. The transport (hsring/transport.hpp) copies a slot into one of them
// (host ring: DMA from the registered ring; peer: device to device from its target's GPU) and
// releases the slot the moment its copy completes; the compute stream waits for the copy before
// training on it. CPU: the copy is a memcpy.
//
// Precision: fp32 master parameters and AdamW state, bf16 compute on GPU (the model casts
// weights in forward), fp32 on CPU. Gradient accumulation is token-weighted: each batch
// back-propagates its summed weighted loss and the step divides by the step's total weight over
// the whole gang (distributed/gradient_sync.hpp sums the ranks' gradients in the step's last
// backward), so N ranks make the update one rank would make on the same global batch.
#include "worker/core/context.hpp"
#include "worker/core/drafter_loop.hpp"

#include <memory>

namespace hsring::worker {

class TorchDrafter final : public DrafterCompute {
public:
    TorchDrafter(Context& ctx, distributed::Gang& gang);
    ~TorchDrafter() override;
    void restore(const std::filesystem::path* checkpoint) override;
    void prepare_replica() override;
    void broadcast_state() override;
    bool receive(ReadSlot& slot) override;
    void stage(ReadSlot slot, PackedBatch batch, std::vector<std::uint8_t> keep) override;
    std::size_t staged() const override;
    BatchResult train_one(bool sync_grads) override;
    BatchResult evaluate_one(const std::vector<std::uint64_t>& sample_ids) override;
    bool synced() const override;
    double sync_grads() override;
    StepResult optimizer_step(double lr, double weight_sum) override;
    void discard_grads() override;
    std::unique_ptr<StateSnapshot> snapshot() override;
    bool snapshot_ready() override;
    void export_model(const std::filesystem::path& dir) override;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace hsring::worker
