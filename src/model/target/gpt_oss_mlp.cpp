// gpt-oss's sparse MLP (see gpt_oss_mlp.hpp).
#include "model/target/gpt_oss_mlp.hpp"

#include "hsring/error.hpp"
#include "model/ops/expert_dispatch.hpp"
#include "model/ops/ops.hpp"

#include <ATen/ATen.h>

namespace hsring::model {

at::Tensor gpt_oss_moe_mlp(const at::Tensor& x, const GptOssMoeWeights& w, const GptOssRouting& routing) {
    const std::int64_t experts = w.router.size(0), k = routing.top_k;
    HSRING_ASSERT(x.dim() == 2 && k >= 1 && k <= experts, "gpt_oss_moe_mlp: x {} top-k {} of {} experts", x.dim(), k,
                  experts);
    const at::Tensor logits = at::linear(x, as_dtype_of(w.router, x), as_dtype_of(w.router_bias, x));  // [T, E]
    auto [top_logits, top_experts] = logits.topk(k, -1);
    const at::Tensor top_weights = at::softmax(top_logits, -1);  // over the k chosen, in x's dtype

    const double limit = routing.swiglu_limit;
    auto clamped_swiglu = [&](const at::Tensor& gate_up) {
        const at::Tensor gate = gate_up.slice(-1, 0, gate_up.size(-1), 2).clamp_max(limit);
        const at::Tensor up = gate_up.slice(-1, 1, gate_up.size(-1), 2).clamp(-limit, limit);
        return (up + 1) * (gate * at::sigmoid(gate * routing.alpha));
    };
    if (grouped_experts_apply(x) && w.gate_up.scalar_type() == x.scalar_type())
        return grouped_experts(x, top_experts, top_weights, w.gate_up, as_dtype_of(w.gate_up_bias, x), w.down,
                               as_dtype_of(w.down_bias, x), clamped_swiglu);
    return dispatch_experts(x, top_experts, top_weights, experts, [&](std::int64_t e, const at::Tensor& rows) {
        const at::Tensor gate_up = at::linear(rows, as_dtype_of(w.gate_up[e], x), as_dtype_of(w.gate_up_bias[e], x));
        return at::linear(clamped_swiglu(gate_up), as_dtype_of(w.down[e], x), as_dtype_of(w.down_bias[e], x));
    });
}

} // namespace hsring::model
