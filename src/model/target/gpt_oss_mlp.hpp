#pragma once
// gpt-oss's sparse MLP block, with transformers' numerics (GptOssTopKRouter + GptOssExperts):
//   router: logits = x @ router^T + bias (x's dtype); top-k of the LOGITS, then softmax over those
//           k (the order Qwen3-MoE reverses: softmax first, then top-k);
//   expert: gate_up = x @ W^T + b, gate and up INTERLEAVED (rows 0, 2, 4.. are gate, 1, 3, 5.. up,
//           as gpt-oss ships them), the clamped SwiGLU
//             gate = min(gate, limit), up = clamp(up, -limit, limit),
//             out  = (up + 1) * gate * sigmoid(alpha * gate)            (limit 7.0, alpha 1.702)
//           then out @ down^T + down_bias, scaled by the routing weight and added into the output
//           expert by expert in ascending order (transformers' summation order).
// Only the tokens routed to an expert are computed; never a dense pass over all experts.
// Weights are output-major like every hsring linear (transformers keeps gpt-oss experts
// input-major, [E, H, 2I]: transpose its tensors; MXFP4 blocks dequantise to this layout).
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace hsring::model {

struct GptOssMoeWeights {
    at::Tensor router;        // [E, H]
    at::Tensor router_bias;   // [E]
    at::Tensor gate_up;       // [E, 2I, H], gate/up rows interleaved
    at::Tensor gate_up_bias;  // [E, 2I]
    at::Tensor down;          // [E, H, I]
    at::Tensor down_bias;     // [E, H]
};

struct GptOssRouting {
    std::int64_t top_k = 0;
    double swiglu_limit = 7.0;
    double alpha = 1.702;
};

// x [T, H] -> [T, H] in x's dtype.
at::Tensor gpt_oss_moe_mlp(const at::Tensor& x, const GptOssMoeWeights& w, const GptOssRouting& routing);

} // namespace hsring::model
