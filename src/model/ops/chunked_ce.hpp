#pragma once
// Cross-entropy against a huge vocabulary without materialising all logits: rows are processed
// `chunk` at a time and the gradient w.r.t. the hidden states is computed in the same pass (a
// custom autograd function), so at most chunk x vocab logits exist at any moment, in forward and
// in backward. The LM head is frozen (no gradient). Without autograd (no-grad mode or hidden not
// requiring grad) only the loss and hits are computed: half the LM-head work.
#include "model/ops/fp8_weights.hpp"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace hsring::model {

struct ChunkedCE {
    at::Tensor loss_sum;  // fp32 scalar: sum_i weights[i] * CE(hidden[i] @ lm_head^T, labels[i])
    at::Tensor correct;   // [N] bool: argmax of the logits == label (not differentiable)
};

// hidden [N, H] (its dtype is the logits' compute dtype), lm_head [V, H], labels [N] int64,
// weights [N] fp32. Differentiable w.r.t. hidden only. With `fp8` (the same head quantised,
// fp8_weights.hpp) both LM-head products (the logits, and the gradient's g @ W) run in FP8.
ChunkedCE chunked_cross_entropy(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                                const at::Tensor& weights, std::int64_t chunk, const Fp8LmHead* fp8 = nullptr);

} // namespace hsring::model
