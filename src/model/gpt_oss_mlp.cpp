// gpt-oss's sparse MLP (see gpt_oss_mlp.hpp).
#include "model/gpt_oss_mlp.hpp"

#include "hsring/error.hpp"
#include "model/ops.hpp"

#include <ATen/ATen.h>

namespace hsring::model {

at::Tensor gpt_oss_moe_mlp(const at::Tensor& x, const GptOssMoeWeights& w, const GptOssRouting& routing) {
    const std::int64_t experts = w.router.size(0), k = routing.top_k;
    HSRING_ASSERT(x.dim() == 2 && k >= 1 && k <= experts, "gpt_oss_moe_mlp: x {} top-k {} of {} experts", x.dim(), k,
                  experts);
    const at::Tensor logits = at::linear(x, as_dtype_of(w.router, x), as_dtype_of(w.router_bias, x));  // [T, E]
    auto [top_logits, top_experts] = logits.topk(k, -1);
    const at::Tensor top_weights = at::softmax(top_logits, -1);  // over the k chosen, in x's dtype

    // The (token, slot) pairs sorted by expert (stable: token order within an expert).
    const auto [sorted_experts, order] = at::sort(top_experts.reshape(-1), std::optional<bool>(true), 0, false);
    const at::Tensor pair_token = order.div(k, "floor");
    const at::Tensor pair_weight = top_weights.reshape(-1).index_select(0, order).unsqueeze(1);
    // Rows per expert on the host: the loop's bounds (one device sync per layer, as transformers).
    const at::Tensor counts = at::bincount(sorted_experts, {}, experts).to(at::kCPU);
    const auto* count = counts.data_ptr<std::int64_t>();
    const double limit = routing.swiglu_limit;

    at::Tensor out = at::zeros_like(x);
    std::int64_t begin = 0;
    for (std::int64_t e = 0; e < experts; ++e) {
        const std::int64_t n = count[e];
        if (n == 0) continue;
        const at::Tensor rows = pair_token.narrow(0, begin, n);
        const at::Tensor gate_up =
            at::linear(x.index_select(0, rows), as_dtype_of(w.gate_up[e], x), as_dtype_of(w.gate_up_bias[e], x));
        const at::Tensor gate = gate_up.slice(-1, 0, gate_up.size(-1), 2).clamp_max(limit);
        const at::Tensor up = gate_up.slice(-1, 1, gate_up.size(-1), 2).clamp(-limit, limit);
        const at::Tensor glu = gate * at::sigmoid(gate * routing.alpha);
        const at::Tensor y = at::linear((up + 1) * glu, as_dtype_of(w.down[e], x), as_dtype_of(w.down_bias[e], x));
        out.index_add_(0, rows, y * pair_weight.narrow(0, begin, n));
        begin += n;
    }
    return out;
}

} // namespace hsring::model
