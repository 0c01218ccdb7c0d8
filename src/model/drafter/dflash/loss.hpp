#pragma once
// One DFlash training loss over a packed batch of captured hidden states (the ring's layout):
// sample blocks (drafter/dflash/blocks.hpp), run the drafter, score every block slot against the
// target's frozen LM head with chunked cross-entropy.
//
//   loss = sum_slots w * CE / sum_slots w        (w: loss mask x optional decay, slot 0 = 0)
//
// Gradients reach the drafter's parameters only: the embedding and LM head are used detached.
#include "model/drafter/dflash/blocks.hpp"
#include "model/drafter/dflash/drafter.hpp"
#include "model/drafter/interface/trainable_drafter.hpp"
#include "model/target/target.hpp"

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace hsring::model {

using DFlashBatch = DrafterBatch;  // drafter/interface/trainable_drafter.hpp

struct DFlashLossOptions {
    int num_anchors = 512;    // blocks per sequence at most
    double gamma = 7.0;       // slot k weighs exp(-(k-1)/gamma); <= 0: no decay
    int chunk = 4096;         // block slots per cross-entropy chunk
    BlockAttentionLayout attention;             // kernel calls of the block attention (attention.hpp)
    bool recompute_layers = false;              // [train] recompute = "layers": see DFlashInputs
    bool fp8_matmul = false;                    // [train] matmul = "fp8": see DFlashInputs
    // [train] lm_head = "fp8": the cross-entropy's LM-head products in FP8 with this head, the
    // TargetHead's lm_head quantised once (chunked_ce.hpp; owned by the caller). nullptr: compute dtype.
    const Fp8LmHead* fp8_lm_head = nullptr;
    std::optional<at::ScalarType> compute_dtype;  // default: bf16 on CUDA, fp32 on CPU
};

struct DFlashLossResult {
    at::Tensor loss;         // fp32 scalar, differentiable (0 without any block: skip backward)
    at::Tensor loss_sum;     // fp32 scalar: sum w * CE (for token-weighted accumulation)
    at::Tensor weight_sum;   // fp32 scalar: sum w
    at::Tensor correct;      // [B-1] fp32: correct argmax predictions per slot 1..B-1 (counted ones)
    at::Tensor counted;      // [B-1] fp32: counted predictions per slot 1..B-1
    std::int64_t num_blocks = 0;
};

// Throws hsring::Error when the batch's hidden states or the head do not fit the drafter.
void check_dflash_batch(DFlashDrafter& drafter, const TargetHead& head, const DFlashBatch& batch);

// `gen` must be a CPU generator (anchor sampling; see drafter/dflash/blocks.hpp).
DFlashLossResult dflash_loss(DFlashDrafter& drafter, const TargetHead& head, const DFlashBatch& batch,
                             const DFlashLossOptions& options, at::Generator& gen);

// The same for blocks chosen by the caller (tests, evaluation).
DFlashLossResult dflash_loss_for_blocks(DFlashDrafter& drafter, const TargetHead& head, const DFlashBatch& batch,
                                        const DFlashBlocks& blocks, const DFlashLossOptions& options);

// The loss of drafter output rows `out` [blocks*B, H] (what dflash_loss_for_blocks computes after
// the drafter's forward).
DFlashLossResult dflash_loss_of_output(const at::Tensor& out, const TargetHead& head, const DFlashBlocks& blocks,
                                       const DFlashLossOptions& options);

// Drafter output rows [blocks*B, H] for the caller's blocks (tests, evaluation).
at::Tensor dflash_hidden(DFlashDrafter& drafter, const TargetHead& head, const DFlashBatch& batch,
                         const DFlashBlocks& blocks, const DFlashLossOptions& options);

} // namespace hsring::model
