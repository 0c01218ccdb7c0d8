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
//
// The [chunk, V] logits are the step's largest tensors (4,096 x 151,936: 1.2 GB in bf16, 2.5 GB
// in fp32), so the pass is written to touch them as few times as it can: fused softmax kernels
// read the compute-dtype logits and do their math in fp32 (one fp32 write: the log-probabilities
// the loss needs exactly), the gradient w * (softmax - onehot) is the compute-dtype softmax with
// the label entries overwritten by p_y - 1 computed in fp32 (so a confident row, p_y ~ 1, keeps
// its small gradient exact up to one rounding, as if the fp32 difference had been rounded), and
// the row weight w is applied to the [chunk, H] result. (Measured on the H200: the earlier
// fp32-upcast version moved ~40 GB per chunk through memory, this one ~15 GB.)
std::pair<at::Tensor, at::Tensor> ce_pass(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                                          const at::Tensor& weights, std::int64_t chunk, at::Tensor* grad) {
    const std::int64_t n = hidden.size(0);
    const at::Tensor w_head = lm_head.scalar_type() == hidden.scalar_type() ? lm_head : lm_head.to(hidden.scalar_type());
    const bool reduced = hidden.scalar_type() != at::kFloat && hidden.scalar_type() != at::kDouble;
    at::Tensor correct = at::empty({n}, hidden.options().dtype(at::kBool));
    at::Tensor loss = at::zeros({}, hidden.options().dtype(at::kFloat));
    for (std::int64_t s = 0; s < n; s += chunk) {
        const std::int64_t c = std::min(chunk, n - s);
        at::Tensor y = labels.narrow(0, s, c).unsqueeze(1);
        at::Tensor w = weights.narrow(0, s, c).to(at::kFloat).unsqueeze(1);
        at::Tensor logits = at::matmul(hidden.narrow(0, s, c), w_head.t());  // [c, V], compute dtype
        correct.narrow(0, s, c).copy_(logits.argmax(1) == y.squeeze(1));
        // fp32 log-probabilities of the label: CE = -log p_y (half_to_float: fp32 math and output).
        // (CUDA fuses the upcast into the kernel; the CPU kernel has no such mode: upcast first.)
        at::Tensor logp = logits.is_cuda() ? at::_log_softmax(logits, 1, /*half_to_float=*/reduced)
                                           : at::log_softmax(logits, 1, at::kFloat);
        at::Tensor logp_y = logp.gather(1, y);  // [c, 1] fp32
        logp = at::Tensor();
        loss.sub_((logp_y * w).sum());
        if (!grad) continue;
        at::Tensor probs = at::_softmax(logits, 1, /*half_to_float=*/false);  // compute dtype
        logits = at::Tensor();  // the chunk's largest buffer: free it before the matmul's output
        probs.scatter_(1, y, (logp_y.exp() - 1.0).to(probs.scalar_type()));
        grad->narrow(0, s, c).copy_(at::matmul(probs, w_head) * w);
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
