// The sparse MLP (see moe_mlp.hpp).
#include "model/target/moe_mlp.hpp"

#include "hsring/error.hpp"
#include "model/ops/expert_dispatch.hpp"
#include "model/ops/ops.hpp"

#include <ATen/ATen.h>

namespace hsring::model {

at::Tensor moe_mlp(const at::Tensor& x, const MoeWeights& w, MoeRouting routing) {
    const std::int64_t experts = w.router.size(0), k = routing.top_k;
    HSRING_ASSERT(x.dim() == 2 && k >= 1 && k <= experts, "moe_mlp: x {} top-k {} of {} experts", x.dim(), k, experts);
    at::Tensor logits = dense(x, w.router);                        // [T, E], x's dtype
    at::Tensor probs = at::softmax(logits, -1, at::kFloat);       // fp32, as transformers
    auto [top_weights, top_experts] = probs.topk(k, -1);          // [T, k] each
    if (routing.norm_topk_prob) top_weights = top_weights / top_weights.sum(-1, /*keepdim=*/true);
    top_weights = top_weights.to(x.scalar_type());

    if (grouped_experts_apply(x) && w.gate_up.scalar_type() == x.scalar_type())
        return grouped_experts(x, top_experts, top_weights, w.gate_up, {}, w.down, {},
                               [](const at::Tensor& h) { return swiglu(h); });
    return dispatch_experts(x, top_experts, top_weights, experts, [&](std::int64_t e, const at::Tensor& rows) {
        return dense(swiglu(dense(rows, w.gate_up[e])), w.down[e]);
    });
}

} // namespace hsring::model
