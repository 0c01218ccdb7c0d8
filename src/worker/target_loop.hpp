#pragma once
// The target worker's loop: claim a slot, pack PENDING samples into it, let the compute write
// their hidden states straight into the slot, commit. Waits on a full ring or an exhausted
// ledger sleep on futexes (no CPU burnt). See CONTRACT.md for when it ends.
#include "worker/context.hpp"
#include "worker/packer.hpp"

namespace hsring::worker {

class TargetCompute {
public:
    virtual ~TargetCompute() = default;
    // Writes the batch's hidden states into the slot payload, layer-major:
    // [n_layers][slot_tokens][hidden] of the ring's dtype; returns when every byte is there.
    virtual void write(const PackedBatch& batch, WriteSlot& slot) = 0;
};

int run_target(Context& ctx, TargetCompute& compute);

} // namespace hsring::worker
