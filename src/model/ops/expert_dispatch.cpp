// Routing tokens to experts and summing their outputs back (see expert_dispatch.hpp).
#include "model/ops/expert_dispatch.hpp"

#include <ATen/ATen.h>
#ifdef HSRING_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

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

bool grouped_experts_apply(const at::Tensor& x) {
#ifdef HSRING_TORCH_CUDA
    if (!x.is_cuda() || x.scalar_type() != at::kBFloat16) return false;
    static const bool sm90 = at::cuda::getCurrentDeviceProperties()->major >= 9;  // _grouped_mm's CUDA kernels
    return sm90;
#else
    (void)x;
    return false;
#endif
}

at::Tensor grouped_experts(const at::Tensor& x, const at::Tensor& top_experts, const at::Tensor& top_weights,
                           const at::Tensor& gate_up, const at::Tensor& gate_up_bias, const at::Tensor& down,
                           const at::Tensor& down_bias, const std::function<at::Tensor(const at::Tensor&)>& act) {
    const std::int64_t t = x.size(0), k = top_experts.size(-1), experts = gate_up.size(0);
    // Each token's choices in ascending expert order: the order its outputs are summed in.
    const auto [experts_asc, slot] = top_experts.sort(-1);
    const at::Tensor weights_asc = top_weights.gather(-1, slot);
    const auto [sorted_experts, order] = at::sort(experts_asc.reshape(-1), std::optional<bool>(true), 0, false);
    const at::Tensor pair_token = order.div(k, "floor");
    // Group ends (inclusive prefix sums of the rows per expert), int32 on the device: no sync.
    const at::Tensor offs = at::bincount(sorted_experts, {}, experts).cumsum(0).to(at::kInt);
    // Each intermediate dropped as soon as the next exists: per routed pair the peak is the
    // larger of rows + gate_up (H + 2I), the activation's temporaries, down + its input (H + I),
    // and the gather back (2H) (src/plan/memory_model.cpp counts this).
    at::Tensor h;
    {
        const at::Tensor rows = x.index_select(0, pair_token);  // [T*k, H], grouped by expert
        h = at::_grouped_mm(rows, gate_up.transpose(1, 2), offs);
    }
    if (gate_up_bias.defined()) h.add_(gate_up_bias.index_select(0, sorted_experts));
    h = act(h);
    at::Tensor y = at::_grouped_mm(h, down.transpose(1, 2), offs);
    h.reset();
    if (down_bias.defined()) y.add_(down_bias.index_select(0, sorted_experts));
    y.mul_(weights_asc.reshape(-1).index_select(0, order).unsqueeze(1).to(y.scalar_type()));
    // Back to (token, slot) order, then the k outputs summed slot by slot (ascending experts).
    at::Tensor per_slot = at::empty_like(y).index_copy_(0, order, y);
    y.reset();
    per_slot = per_slot.view({t, k, x.size(1)});
    at::Tensor out = per_slot.select(1, 0).clone();
    for (std::int64_t j = 1; j < k; ++j) out.add_(per_slot.select(1, j));
    return out;
}

} // namespace hsring::model
