#pragma once
// Evaluation of a DFlash drafter: the training loss and per-position accuracy without gradients,
// at deterministic anchors (eval_dflash_blocks: the training rule, seeded per sample), summed so
// that batches, processes and ranks add up. `hsring-model check-drafter` uses it; the drafter
// worker's held-out evaluation can too.
//
//   loss        = loss_sum / weight_sum          (w = loss_mask x exp(-(k-1)/gamma), as in training)
//   accuracy[k] = correct[k] / counted[k]        (block position k+1, label loss-masked)
//   accept_len  = expected_accept_length(accuracy)   (include/hsring/acceptance.hpp)
#include "model/drafter/dflash/loss.hpp"

#include <cstdint>
#include <vector>

namespace hsring::model {

using DFlashEvalSums = DrafterEvalSums;  // drafter/interface/trainable_drafter.hpp

// Sums for the caller's blocks, no gradients, in the compute dtype (options.fp8_matmul and
// options.fp8_lm_head are ignored: evaluation scores the drafter as inference runs it). When
// `drafter_output` is given it receives the drafter's output rows [blocks*B, H] (compute dtype),
// e.g. to dump logits.
DFlashEvalSums evaluate_dflash(DFlashDrafter& drafter, const TargetHead& head, const DFlashBatch& batch,
                               const DFlashBlocks& blocks, const DFlashLossOptions& options,
                               at::Tensor* drafter_output = nullptr);

// The same at eval_dflash_blocks(options.num_anchors, options.gamma, seed, sample_ids): one
// sample id per sequence of the batch (e.g. its index in the data set).
DFlashEvalSums evaluate_dflash(DFlashDrafter& drafter, const TargetHead& head, const DFlashBatch& batch,
                               const std::vector<std::uint64_t>& sample_ids, std::uint64_t seed,
                               const DFlashLossOptions& options);

} // namespace hsring::model
