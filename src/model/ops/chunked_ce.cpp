#include "model/ops/chunked_ce.hpp"

#include "hsring/error.hpp"
#include "model/ops/kernel_call.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#if HSRING_KERNELS_ON
#include "kernels/cross_entropy_rows.hpp"

#include <c10/cuda/CUDAGuard.h>
#endif

namespace hsring::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Whether a chunk's logits go through the cross_entropy_rows kernel (src/kernels): a GPU build
// with the kernels, CUDA tensors of a dtype they take.
bool fused_rows(const at::Tensor& hidden) {
#if HSRING_KERNELS_ON
    return hidden.is_cuda() && kernel_call::supported(hidden.scalar_type());
#else
    (void)hidden;
    return false;
#endif
}

// The kernel on one chunk: per-row -log p_label into row_loss (fp32), argmax == label into
// correct (bool), and with write_grad the logits overwritten by softmax - onehot, or with grad_fp8
// that quantised per row into *grad_fp8 (its first logits.size(0) rows; the logits left as they are).
void cross_entropy_rows(at::Tensor& logits, const at::Tensor& labels, at::Tensor& row_loss, at::Tensor& correct,
                        bool write_grad, Fp8Rows* grad_fp8 = nullptr) {
#if HSRING_KERNELS_ON
    HSRING_ASSERT(logits.dim() == 2 && logits.stride(1) == 1 && labels.is_contiguous() &&
                  labels.scalar_type() == at::kLong && row_loss.is_contiguous() && correct.is_contiguous() &&
                  correct.scalar_type() == at::kBool);
    const c10::cuda::CUDAGuard guard(logits.device());
    kernels::CrossEntropyRowsArgs a;
    a.logits = logits.data_ptr();
    a.rows = logits.size(0);
    a.vocab = logits.size(1);
    a.row_stride = logits.stride(0);
    a.labels = labels.data_ptr<std::int64_t>();
    a.loss = row_loss.data_ptr<float>();
    a.correct = reinterpret_cast<std::uint8_t*>(correct.data_ptr<bool>());
    a.write_grad = write_grad;
    if (grad_fp8) {
        HSRING_ASSERT(write_grad && grad_fp8->data.is_contiguous() && grad_fp8->data.size(1) == a.vocab &&
                      grad_fp8->data.size(0) >= a.rows && grad_fp8->scale.is_contiguous());
        a.grad_fp8 = static_cast<std::uint8_t*>(grad_fp8->data.data_ptr());
        a.grad_scale = grad_fp8->scale.data_ptr<float>();
    }
    a.dtype = kernel_call::dtype(logits.scalar_type());
    a.stream = kernel_call::stream(logits);
    kernel_call::check(kernels::cross_entropy_rows(a), "cross-entropy kernel on {} [{} x {}]", logits.device().str(),
                       a.rows, a.vocab);
#else
    (void)logits, (void)labels, (void)row_loss, (void)correct, (void)write_grad, (void)grad_fp8;
    HSRING_ASSERT(false, "cross_entropy_rows without src/kernels");
#endif
}

// One pass over the rows, `chunk` at a time: loss sum and argmax hits, and d(loss)/d(hidden)
// into `grad` when given (training); without it, half the LM-head matmuls (evaluation).
//
// The [chunk, V] logits are the step's largest tensors (4,096 x 151,936: 1.2 GB in bf16), so
// they stay in the compute dtype: one fused softmax kernel (fp32 math, one rounding per
// probability) and reductions with fp32 accumulation, ~7 passes over compute-dtype data. (The
// earlier version upcast to fp32 and moved ~40 GB per chunk through memory, this one ~9 GB.)
// Precision, with p the rounded probabilities (relative error u = 2^-8 in bf16):
//  - loss: -log p_y = (x_max - x_y) - log p_max, with the logits x exact and
//    -log p_max = -log1p(-rest) for p_max > 1/2 (rest = sum of the other p, fp32 sum of positive
//    terms: relative error u), else -log p_max: absolute error <= u per token, no underflow
//    (p_max >= 1/V) however unlikely the label;
//  - gradient w * (p - onehot): the label entry p_y - 1 = -(the fp32 sum of the other p), so a
//    confident row (p_y ~ 1) keeps its small gradient to relative u, as if the fp32 difference
//    had been rounded once; w is applied to the [chunk, H] result.
// On the GPU (fused_rows) the cross_entropy_rows kernel does all of that in two reads of the
// logits and one write (src/kernels/cross_entropy_rows.hpp), with the loss from fp32 sums of
// unrounded exponentials.
// With `fp8` the two LM-head products are FP8 (fp8_dense: h and g quantised per row, the head once).
std::pair<at::Tensor, at::Tensor> ce_pass(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                                          const at::Tensor& weights, std::int64_t chunk, at::Tensor* grad,
                                          const Fp8LmHead* fp8) {
    const std::int64_t n = hidden.size(0);
    const at::Tensor w_head = lm_head.scalar_type() == hidden.scalar_type() ? lm_head : lm_head.to(hidden.scalar_type());
    at::Tensor correct = at::empty({n}, hidden.options().dtype(at::kBool));
    at::Tensor loss = at::zeros({}, hidden.options().dtype(at::kFloat));
    const bool fused = fused_rows(hidden);
    const at::Tensor labels64 = labels.to(at::kLong).contiguous();
    for (std::int64_t s = 0; s < n; s += chunk) {
        const std::int64_t c = std::min(chunk, n - s);
        at::Tensor y = labels64.narrow(0, s, c).unsqueeze(1);
        at::Tensor w = weights.narrow(0, s, c).to(at::kFloat).unsqueeze(1);
        const at::Tensor h = hidden.narrow(0, s, c);
        at::Tensor logits = fp8 ? fp8_dense(h, fp8->logits) : at::matmul(h, w_head.t());  // [c, V], compute dtype
        if (fused) {
            at::Tensor row_loss = at::empty({c}, hidden.options().dtype(at::kFloat));
            at::Tensor hit = correct.narrow(0, s, c);
            // FP8: the kernel writes softmax - onehot already quantised per row, from its fp32
            // values (no bf16 copy of g, no quantising pass over it).
            Fp8Rows gq;
            if (fp8 && grad) gq = empty_fp8_rows(c, logits.size(1), logits);
            cross_entropy_rows(logits, labels64.narrow(0, s, c), row_loss, hit, grad != nullptr, gq.defined() ? &gq : nullptr);
            loss.add_((row_loss * w.squeeze(1)).sum());
            if (!grad) continue;
            at::Tensor g = grad->narrow(0, s, c);
            if (fp8) {
                logits = at::Tensor();  // its memory for the product's output
                at::mul_out(g, fp8_dense(gq, fp8->grad, hidden.scalar_type()), w);
            } else {
                at::mm_out(g, logits, w_head);
                g.mul_(w);
            }
            continue;
        }
        auto [x_max, arg_max] = logits.max(1, /*keepdim=*/true);
        correct.narrow(0, s, c).copy_(arg_max.squeeze(1) == y.squeeze(1));
        const at::Tensor gap = x_max.to(at::kFloat) - logits.gather(1, y).to(at::kFloat);  // x_max - x_y >= 0
        at::Tensor p = at::_softmax(logits, 1, /*half_to_float=*/false);
        logits = at::Tensor();  // free the chunk's logits before the next buffers
        // rest = 1 - p_y as the fp32 sum of the other probabilities (without p_y in the sum: a
        // sum near 1 would round a rest of 1e-6 to a few percent).
        const at::Tensor p_y = p.gather(1, y).to(at::kFloat);
        const at::Tensor p_max = p.gather(1, arg_max).to(at::kFloat);
        p.scatter_(1, y, 0.0);
        const at::Tensor rest = at::sum(p, {1}, /*keepdim=*/true, at::kFloat);
        const at::Tensor rest_max = at::where(arg_max == y, rest, rest + p_y - p_max);  // 1 - p_max
        const at::Tensor nll_max = at::where(p_max > 0.5, -at::log1p(-rest_max), -at::log(p_max));
        loss.add_(((gap + nll_max) * w).sum());
        if (!grad) continue;
        p.scatter_(1, y, (-rest).to(p.scalar_type()));  // p_y - 1
        grad->narrow(0, s, c).copy_((fp8 ? fp8_dense(p, fp8->grad) : at::matmul(p, w_head)) * w);
    }
    return {loss, correct};
}

struct ChunkedCEFunction : public torch::autograd::Function<ChunkedCEFunction> {
    static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& lm_head,
                                 const at::Tensor& labels, const at::Tensor& weights, std::int64_t chunk,
                                 const Fp8LmHead* fp8) {
        at::Tensor grad = at::empty_like(hidden);
        auto [loss, correct] = ce_pass(hidden, lm_head, labels, weights, chunk, &grad, fp8);
        ctx->saved_data["grad"] = grad;
        ctx->mark_non_differentiable({correct});
        return {loss, correct};
    }

    static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
        at::Tensor grad = ctx->saved_data["grad"].toTensor();
        // A 0-dim fp32 factor keeps bf16 grads scaled in fp32 opmath (no rounding of the factor).
        at::Tensor g = grad_out[0].defined() ? grad * grad_out[0] : at::zeros_like(grad);
        return {g, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
};

} // namespace

ChunkedCE chunked_cross_entropy(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                                const at::Tensor& weights, std::int64_t chunk, const Fp8LmHead* fp8) {
    if (chunk <= 0) fail("cross-entropy chunk must be positive, got {}", chunk);
    HSRING_ASSERT(hidden.dim() == 2 && lm_head.dim() == 2 && hidden.size(1) == lm_head.size(1));
    HSRING_ASSERT(labels.size(0) == hidden.size(0) && weights.size(0) == hidden.size(0));
    if (hidden.size(0) == 0) {
        // Keep the graph connected so backward() still works on an empty selection.
        return {hidden.sum().to(at::kFloat) * 0, at::empty({0}, hidden.options().dtype(at::kBool))};
    }
    if (!at::GradMode::is_enabled() || !hidden.requires_grad()) {
        auto [loss, correct] = ce_pass(hidden, lm_head.detach(), labels, weights, chunk, nullptr, fp8);
        return {loss, correct};
    }
    HSRING_ASSERT(!fp8 || (fp8->logits.data.sizes() == lm_head.sizes()), "the FP8 LM head is not this head's");
    auto out = ChunkedCEFunction::apply(hidden, lm_head.detach(), labels, weights, chunk, fp8);
    return {out[0], out[1]};
}

} // namespace hsring::model
