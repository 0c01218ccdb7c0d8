#include "model/ops/fused_adamw.hpp"

#include "hsring/error.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>
#include <vector>

namespace hsring::model {

torch::optim::AdamWParamState& adamw_state(torch::optim::AdamW& opt, const at::Tensor& p) {
    auto& slot = opt.state()[p.unsafeGetTensorImpl()];
    if (!slot) {  // as AdamW::step: zero moments at the first step
        auto st = std::make_unique<torch::optim::AdamWParamState>();
        st->step(0);
        st->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        st->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(st);
    }
    return static_cast<torch::optim::AdamWParamState&>(*slot);
}

FusedAdamW::FusedAdamW(torch::optim::AdamW& opt) : opt_(opt) {
    HSRING_ASSERT(opt_.param_groups().size() == 1, "one param group, got {}", opt_.param_groups().size());
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(opt_.param_groups().front().options());
    HSRING_ASSERT(!o.amsgrad(), "the fused AdamW step runs without amsgrad");
}

at::Tensor FusedAdamW::step(double divisor, double clip) {
    HSRING_ASSERT(divisor > 0);
    torch::NoGradGuard no_grad;
    auto& group = opt_.param_groups().front();
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::vector<at::Tensor> with_grad, grads;
    for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        HSRING_ASSERT(p.device() == group.params().front().device(), "the parameters share one device");
        with_grad.push_back(p);
        grads.push_back(p.grad());
    }
    if (with_grad.empty()) return {};
    const auto n = static_cast<std::int64_t>(with_grad.size());
    const auto f32 = at::TensorOptions().dtype(at::kFloat).device(with_grad.front().device());

    // The global norm of the raw gradients, then the divisor and the clip as one scale.
    const at::Tensor raw_norm = at::linalg_vector_norm(at::stack(at::_foreach_norm(grads, 2)), 2);
    const at::Tensor norm = raw_norm / divisor;
    // Nothing non-finite is ever trained (invariant 10, docs/architecture.md): a gradient with a NaN or inf
    // leaves weights, moments and step counts as they are. One read of the norm (the device has
    // finished the backward by now: the loop read the batch's sums).
    if (!std::isfinite(norm.item<double>())) return norm;

    std::vector<at::Tensor> params, exp_avgs, exp_avg_sqs;
    std::vector<double> counts;
    for (auto& p : with_grad) {
        torch::optim::AdamWParamState& st = adamw_state(opt_, p);
        st.step(st.step() + 1);
        params.push_back(p.detach());
        exp_avgs.push_back(st.exp_avg());
        exp_avg_sqs.push_back(st.exp_avg_sq());
        counts.push_back(static_cast<double>(st.step()));
    }

    // Step counts on the device: one fill when they agree (always, once every parameter has
    // trained), else a small copy.
    if (!steps_.defined() || steps_.size(0) != n || steps_.device() != params.front().device())
        steps_ = at::empty({n}, f32);
    bool same = true;
    for (double c : counts) same = same && c == counts.front();
    if (same) steps_.fill_(counts.front());
    else steps_.copy_(at::tensor(counts, at::TensorOptions().dtype(at::kDouble)).to(at::kFloat));
    const std::vector<at::Tensor> steps = steps_.unbind(0);

    at::Tensor scale = clip > 0 ? at::clamp_min((norm + 1e-6) / clip, 1.0) * divisor : at::full({}, divisor, f32);
    scale = scale.to(at::kFloat);

    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, o.lr(),
                      std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps(), /*amsgrad=*/false,
                      /*maximize=*/false, /*grad_scale=*/scale, /*found_inf=*/std::nullopt);
    return norm;
}

} // namespace hsring::model
