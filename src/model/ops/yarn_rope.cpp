// YaRN frequencies (see yarn_rope.hpp); the same fp32 operations in the same order as transformers.
#include "model/ops/yarn_rope.hpp"

#include "hsring/error.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace hsring::model {
namespace {

double mscale_of(double scale, double mscale = 1.0) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// The dimension at which a frequency turns `rotations` times over the original context.
double correction_dim(double rotations, double dim, double base, double original) {
    return dim * std::log(original / (rotations * 2 * M_PI)) / (2 * std::log(base));
}

} // namespace

double yarn_attention_factor(const RopeScaling& p) {
    if (p.attention_factor) return *p.attention_factor;
    if (p.mscale && p.mscale_all_dim && *p.mscale != 0 && *p.mscale_all_dim != 0)
        return mscale_of(p.factor, *p.mscale) / mscale_of(p.factor, *p.mscale_all_dim);
    return mscale_of(p.factor);
}

YarnRope yarn_rope(std::int64_t head_dim, double theta, const RopeScaling& p) {
    if (head_dim <= 0 || head_dim % 2 != 0) fail("YaRN rope: head_dim must be even and positive, got {}", head_dim);
    if (!(p.factor >= 1.0)) fail("YaRN rope: factor must be >= 1, got {}", p.factor);
    YarnRope r;
    r.attention_factor = yarn_attention_factor(p);

    const auto dim = static_cast<double>(head_dim);
    const auto original = static_cast<double>(p.original_max_position_embeddings);
    double low = correction_dim(p.beta_fast, dim, theta, original);
    double high = correction_dim(p.beta_slow, dim, theta, original);
    if (p.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high) high += 0.001;  // no singular ramp

    const auto floats = at::TensorOptions().dtype(at::kFloat);
    const at::Tensor pos_freqs = at::pow(theta, at::arange(0, head_dim, 2, floats) / dim);
    const at::Tensor extrapolation = 1.0 / pos_freqs;
    const at::Tensor interpolation = 1.0 / (p.factor * pos_freqs);
    const at::Tensor ramp = ((at::arange(head_dim / 2, floats) - low) / (high - low)).clamp(0, 1);
    const at::Tensor keep = 1 - ramp;  // 1: the original frequency (extrapolate), 0: interpolated
    r.inv_freq = interpolation * (1 - keep) + extrapolation * keep;
    return r;
}

} // namespace hsring::model
