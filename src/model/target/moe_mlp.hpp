#pragma once
// Qwen3-MoE's sparse MLP block, with transformers' numerics (Qwen3MoeTopKRouter +
// Qwen3MoeExperts): router logits = x @ router^T in x's dtype, softmax in fp32, top-k,
// renormalised over the top-k when norm_topk_prob, cast back to x's dtype; each expert a SwiGLU
// over only the tokens routed to it, scaled by its routing weight and added into the output
// expert by expert in ascending order (transformers' summation order). Never a dense pass over
// all experts.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace hsring::model {

// One sparse layer's weights, the experts stacked (the layout of transformers 5's in-memory
// experts, and what a grouped GEMM takes).
struct MoeWeights {
    at::Tensor router;   // [E, H]  (HF mlp.gate.weight)
    at::Tensor gate_up;  // [E, 2I, H]: expert e's gate_proj rows, then its up_proj rows
    at::Tensor down;     // [E, H, I]
};

struct MoeRouting {
    std::int64_t top_k = 0;
    bool norm_topk_prob = false;
};

// x [T, H] -> [T, H] in x's dtype. Weights in another dtype are cast per expert.
at::Tensor moe_mlp(const at::Tensor& x, const MoeWeights& w, MoeRouting routing);

} // namespace hsring::model
