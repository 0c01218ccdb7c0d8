#pragma once
// The target worker's loop: claim a slot, take the next plan slot (or held-out samples) for it,
// let the compute write their hidden states straight into the slot, reject the samples whose
// states are not finite, commit. Waits on a full ring, an exhausted ledger or a closed window
// sleep on futexes (no CPU burnt). See CONTRACT.md for when it ends.
#include "worker/core/context.hpp"
#include "worker/core/packer.hpp"
#include "worker/core/responses.hpp"

#include <cstdint>
#include <vector>

namespace hsring::worker {

class TargetCompute {
public:
    virtual ~TargetCompute() = default;
    // Writes the batch's hidden states into the slot payload, layer-major:
    // [n_layers][slot_tokens][hidden] of the ring's dtype; returns when every byte is there.
    // Returns per sample whether a captured hidden state of it was not finite (NaN or inf): such
    // a sample's non-finite rows are written as zeros, and the loop rejects it.
    virtual std::vector<std::uint8_t> write(const PackedBatch& batch, WriteSlot& slot) = 0;
    // How long the last write() computed on its device, in seconds (the GPU's clock; wall time
    // on the CPU).
    virtual double last_compute_s() const = 0;
    // [data] responses = "target": one answer per request (responses.hpp), with the [generate]
    // settings. Only a compute with a model can (config.cpp refuses it for synthetic runs).
    virtual std::vector<std::vector<std::int64_t>> generate_answers(const std::vector<AnswerRequest>& requests);
    // A short unit of side work (the tau measurement, spec_probe.hpp: one prompt's decoding),
    // called while the ring is full or the plan's window is closed (this target is ahead), and
    // after a slot when half the ring is READY.
    virtual void between_slots() {}
};

int run_target(Context& ctx, TargetCompute& compute);

} // namespace hsring::worker
