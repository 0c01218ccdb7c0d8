#pragma once
// The EAGLE-3 training loss over a packed batch of the ring's layout (hidden [4, T, H]: the 3 fused
// layers, then the target's last layer), the public recipe's (vllm-project/speculators' Eagle3
// forward with its default forward-KL loss), per sequence:
//
//   a sequence of n tokens x_0..x_{n-1} gives rows j = 0..n-2: fused layers of position j, token
//   x_{j+1}, position j+1 (speculators' shift_batch). At step k row j embeds x_{j+1+k} and predicts
//   the target's distribution at position j+1+k: softmax over the draft vocabulary of the target's
//   LM head rows applied to its final norm of the last layer's output there. Rows whose position
//   j+1+k falls past the sequence's end are not scored (speculators' align_for_step; unlike its
//   packed batches, a sequence never borrows its neighbour's tokens).
//
//   KL_k(j)    = sum_v p_target(v) (log p_target(v) - log_softmax(logits_k(j))(v))
//   loss_sum   = sum_k decay^k sum_j mask_k(j) KL_k(j)      mask_k(j) = loss_mask[j+1+k], in range
//   weight_sum = sum_j mask_0(j)
//
// speculators divides each step's sum by that step's own mask sum (+1e-5) per packed batch; hsring
// divides the step's whole sum by weight_sum so that micro-batches and ranks add up (the drafter
// worker's token-weighted accumulation). The per-step sums equal speculators' (Eagle3LossParts).
#include "model/drafter/eagle3/drafter.hpp"
#include "model/drafter/interface/trainable_drafter.hpp"
#include "model/target/target.hpp"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace hsring::model {

// The per-step pieces (tests compare them with the reference).
struct Eagle3LossParts {
    std::vector<at::Tensor> kl_sum;    // K x fp32 scalar (differentiable): sum_j mask_k(j) KL_k(j)
    std::vector<at::Tensor> mask_sum;  // K x fp32 scalar
    std::vector<at::Tensor> logits;    // K x [R, Vd] fp32: every row's logits at step k
    std::vector<std::int64_t> row_begin;  // S+1: sequence s's rows are [row_begin[s], row_begin[s+1])
};

// The rows of a batch for `steps` training-time-test steps (eagle3/drafter.hpp), and for each step
// the rows' target positions [R] (clamped) and their masks [R] fp32.
struct Eagle3BatchRows {
    Eagle3Rows rows;
    std::vector<at::Tensor> target_positions, masks;
    std::vector<std::int64_t> row_begin;
};
Eagle3BatchRows eagle3_rows(const DrafterBatch& batch, int steps);

// Throws hsring::Error when the batch's hidden states or the head do not fit the drafter.
void check_eagle3_batch(Eagle3Drafter& drafter, const TargetHead& head, const DrafterBatch& batch);

// `head.norm` is the target's final norm. With `parts`, the per-step pieces are kept.
DrafterLoss eagle3_loss(Eagle3Drafter& drafter, const TargetHead& head, const DrafterBatch& batch, int steps,
                        double decay, at::ScalarType dtype, Eagle3LossParts* parts = nullptr);

} // namespace hsring::model
