// The sparse MLP (see moe_mlp.hpp).
#include "model/moe_mlp.hpp"

#include "hsring/error.hpp"
#include "model/ops.hpp"

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

    // The (token, slot) pairs sorted by expert; stable, so each expert's rows keep token order.
    const auto [sorted_experts, order] = at::sort(top_experts.reshape(-1), std::optional<bool>(true), 0, false);
    const at::Tensor pair_token = order.div(k, "floor");
    const at::Tensor pair_weight = top_weights.reshape(-1).index_select(0, order).unsqueeze(1);
    // Rows per expert on the host: the loop's bounds (one device sync per layer, as transformers).
    const at::Tensor counts = at::bincount(sorted_experts, {}, experts).to(at::kCPU);
    const auto* count = counts.data_ptr<std::int64_t>();

    at::Tensor out = at::zeros_like(x);
    std::int64_t begin = 0;
    for (std::int64_t e = 0; e < experts; ++e) {
        const std::int64_t n = count[e];
        if (n == 0) continue;
        const at::Tensor rows = pair_token.narrow(0, begin, n);
        at::Tensor y = dense(swiglu(dense(x.index_select(0, rows), w.gate_up[e])), w.down[e]);
        out.index_add_(0, rows, y * pair_weight.narrow(0, begin, n));
        begin += n;
    }
    return out;
}

} // namespace hsring::model
