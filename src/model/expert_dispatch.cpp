// Routing tokens to experts and summing their outputs back (see expert_dispatch.hpp).
#include "model/expert_dispatch.hpp"

#include <ATen/ATen.h>

#include <optional>

namespace hsring::model {

at::Tensor dispatch_experts(const at::Tensor& x, const at::Tensor& top_experts, const at::Tensor& top_weights,
                            std::int64_t experts, const std::function<at::Tensor(std::int64_t, const at::Tensor&)>& expert) {
    const std::int64_t k = top_experts.size(-1);
    // The (token, slot) pairs sorted by expert; stable, so each expert's rows keep token order.
    const auto [sorted_experts, order] = at::sort(top_experts.reshape(-1), std::optional<bool>(true), 0, false);
    const at::Tensor pair_token = order.div(k, "floor");
    const at::Tensor pair_weight = top_weights.reshape(-1).index_select(0, order).unsqueeze(1);
    const at::Tensor counts = at::bincount(sorted_experts, {}, experts).to(at::kCPU);
    const auto* count = counts.data_ptr<std::int64_t>();

    at::Tensor out = at::zeros_like(x);
    std::int64_t begin = 0;
    for (std::int64_t e = 0; e < experts; ++e) {
        const std::int64_t n = count[e];
        if (n == 0) continue;
        const at::Tensor rows = pair_token.narrow(0, begin, n);
        out.index_add_(0, rows, expert(e, x.index_select(0, rows)) * pair_weight.narrow(0, begin, n));
        begin += n;
    }
    return out;
}

} // namespace hsring::model
