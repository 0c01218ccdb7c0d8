#include "model/decode/sampling.hpp"

#include "hsring/error.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

namespace hsring::model {

void check_sampling(const SamplingParams& p) {
    if (!(p.temperature >= 0) || !std::isfinite(p.temperature))
        fail("sampling: temperature must be a finite number >= 0 (0 = greedy), got {}", p.temperature);
    if (!(p.top_p > 0 && p.top_p <= 1)) fail("sampling: top_p must lie in (0, 1], got {}", p.top_p);
}

at::Tensor sample_tokens(const at::Tensor& logits, const SamplingParams& params, const std::vector<double>& uniforms) {
    check_sampling(params);
    HSRING_ASSERT(logits.dim() == 2, "sample_tokens wants [rows, vocab] logits");
    if (params.temperature == 0) return logits.argmax(-1);
    const std::int64_t rows = logits.size(0);
    HSRING_ASSERT(static_cast<std::int64_t>(uniforms.size()) == rows, "{} uniforms for {} rows", uniforms.size(), rows);
    at::NoGradGuard no_grad;
    at::Tensor probs = at::softmax(logits.to(at::kFloat) / params.temperature, -1);
    // Descending order; a stable sort so equal probabilities keep the lower token id first on
    // every device.
    auto [sorted, order] = probs.sort(/*stable=*/true, /*dim=*/-1, /*descending=*/true);
    at::Tensor cum = sorted.cumsum(-1);
    if (params.top_p < 1) {
        // TopPLogitsWarper keeps the tokens whose mass before them is < top_p (the first always).
        at::Tensor keep = (cum - sorted) < params.top_p;
        keep.select(-1, 0).fill_(true);
        sorted = sorted * keep;
        cum = sorted.cumsum(-1);
    }
    // Inverse CDF: the first token whose cumulative mass exceeds u * (the set's mass). The count
    // of entries <= the threshold is that token's place (clamped: rounding at the top end).
    at::Tensor u = at::tensor(uniforms, at::TensorOptions().dtype(at::kDouble)).to(logits.device(), at::kFloat);
    at::Tensor threshold = (u * cum.select(-1, -1)).unsqueeze(-1);
    at::Tensor place = (cum <= threshold).sum(-1).clamp_max(sorted.size(-1) - 1);
    // A place past the tokens with mass can only come from rounding: step back onto the last one.
    place = at::minimum(place, (sorted > 0).sum(-1) - 1);
    return order.gather(-1, place.unsqueeze(-1)).squeeze(-1);
}

} // namespace hsring::model
