#include "model/chunked_ce.hpp"

#include "hsring/error.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

namespace hsring::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One pass over the rows, `chunk` at a time: loss sum and argmax hits, and d(loss)/d(hidden)
// into `grad` when given (training); without it, half the LM-head matmuls (evaluation).
std::pair<at::Tensor, at::Tensor> ce_pass(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                                          const at::Tensor& weights, std::int64_t chunk, at::Tensor* grad) {
    const std::int64_t n = hidden.size(0);
    const at::Tensor w_head = lm_head.scalar_type() == hidden.scalar_type() ? lm_head : lm_head.to(hidden.scalar_type());
    at::Tensor correct = at::empty({n}, hidden.options().dtype(at::kBool));
    at::Tensor loss = at::zeros({}, hidden.options().dtype(at::kFloat));
    for (std::int64_t s = 0; s < n; s += chunk) {
        const std::int64_t c = std::min(chunk, n - s);
        at::Tensor y = labels.narrow(0, s, c).unsqueeze(1);
        at::Tensor w = weights.narrow(0, s, c).to(at::kFloat).unsqueeze(1);
        at::Tensor logits = at::matmul(hidden.narrow(0, s, c), w_head.t()).to(at::kFloat);  // [c, V]
        at::Tensor lse = at::logsumexp(logits, 1, /*keepdim=*/true);
        loss.add_(((lse - logits.gather(1, y)) * w).sum());
        correct.narrow(0, s, c).copy_(logits.argmax(1) == y.squeeze(1));
        if (!grad) continue;
        // d(sum w * CE)/d logits = w * (softmax - onehot), built in place over the logits.
        logits.sub_(lse).exp_();
        logits.scatter_add_(1, y, at::full({c, 1}, -1.0f, logits.options()));
        logits.mul_(w);
        grad->narrow(0, s, c).copy_(at::matmul(logits.to(hidden.scalar_type()), w_head));
    }
    return {loss, correct};
}

struct ChunkedCEFunction : public torch::autograd::Function<ChunkedCEFunction> {
    static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& lm_head,
                                 const at::Tensor& labels, const at::Tensor& weights, std::int64_t chunk) {
        at::Tensor grad = at::empty_like(hidden);
        auto [loss, correct] = ce_pass(hidden, lm_head, labels, weights, chunk, &grad);
        ctx->saved_data["grad"] = grad;
        ctx->mark_non_differentiable({correct});
        return {loss, correct};
    }

    static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
        at::Tensor grad = ctx->saved_data["grad"].toTensor();
        // A 0-dim fp32 factor keeps bf16 grads scaled in fp32 opmath (no rounding of the factor).
        at::Tensor g = grad_out[0].defined() ? grad * grad_out[0] : at::zeros_like(grad);
        return {g, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
};

} // namespace

ChunkedCE chunked_cross_entropy(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                                const at::Tensor& weights, std::int64_t chunk) {
    if (chunk <= 0) fail("cross-entropy chunk must be positive, got {}", chunk);
    HSRING_ASSERT(hidden.dim() == 2 && lm_head.dim() == 2 && hidden.size(1) == lm_head.size(1));
    HSRING_ASSERT(labels.size(0) == hidden.size(0) && weights.size(0) == hidden.size(0));
    if (hidden.size(0) == 0) {
        // Keep the graph connected so backward() still works on an empty selection.
        return {hidden.sum().to(at::kFloat) * 0, at::empty({0}, hidden.options().dtype(at::kBool))};
    }
    if (!at::GradMode::is_enabled() || !hidden.requires_grad()) {
        auto [loss, correct] = ce_pass(hidden, lm_head.detach(), labels, weights, chunk, nullptr);
        return {loss, correct};
    }
    auto out = ChunkedCEFunction::apply(hidden, lm_head.detach(), labels, weights, chunk);
    return {out[0], out[1]};
}

} // namespace hsring::model
