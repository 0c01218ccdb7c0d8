#include "model/ops/ops.hpp"

#include "hsring/error.hpp"
#include "model/ops/fused_rope.hpp"
#include "model/ops/yarn_rope.hpp"

#include <ATen/ATen.h>

#include <cmath>

namespace hsring::model {

at::Tensor as_dtype_of(const at::Tensor& w, const at::Tensor& x) {
    return w.scalar_type() == x.scalar_type() ? w : w.to(x.scalar_type());
}

at::Tensor dense(const at::Tensor& x, const at::Tensor& w) { return at::linear(x, as_dtype_of(w, x)); }

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
    // at::rms_norm upcasts reduced-precision input to fp32, rounds back, then multiplies by the
    // weight: the same sequence as transformers' Qwen3RMSNorm / LlamaRMSNorm.
    return at::rms_norm(x, {x.size(-1)}, as_dtype_of(w, x), eps);
}

at::Tensor swiglu(const at::Tensor& gate_up) {
    auto parts = gate_up.chunk(2, -1);
    return at::silu(parts[0]) * parts[1];
}

at::Tensor rope_inv_freq(std::int64_t head_dim, double theta, const RopeScaling& scaling) {
    if (head_dim % 2 != 0) fail("rotary embedding needs an even head_dim, got {}", head_dim);
    // As transformers: base ** (arange(0, d, 2).float() / d) in fp32, then its reciprocal.
    at::Tensor exponent = at::arange(0, head_dim, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) /
                          static_cast<double>(head_dim);
    at::Tensor inv = 1.0 / at::pow(theta, exponent);
    if (scaling.type.empty()) return inv;
    if (scaling.type == "linear") return inv / scaling.factor;
    if (scaling.type == "llama3") {
        const double factor = scaling.factor;
        const double low = scaling.low_freq_factor, high = scaling.high_freq_factor;
        const double old_len = static_cast<double>(scaling.original_max_position_embeddings);
        const double low_wavelen = old_len / low, high_wavelen = old_len / high;
        at::Tensor wavelen = 2.0 * M_PI / inv;
        at::Tensor scaled = at::where(wavelen > low_wavelen, inv / factor, inv);
        at::Tensor smooth = (old_len / wavelen - low) / (high - low);
        at::Tensor smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
        at::Tensor medium = at::logical_not(wavelen < high_wavelen) & at::logical_not(wavelen > low_wavelen);
        return at::where(medium, smoothed, scaled);
    }
    if (scaling.type == "yarn") return yarn_rope(head_dim, theta, scaling).inv_freq;
    fail("rope scaling type \"{}\" is not supported (supported: llama3, linear, yarn)", scaling.type);
}

double rope_attention_factor(const RopeScaling& scaling) {
    return scaling.type == "yarn" ? yarn_attention_factor(scaling) : 1.0;
}

RopeTables rope_tables(const at::Tensor& inv_freq, const at::Tensor& positions, at::ScalarType dtype,
                       double attention_factor) {
    at::Tensor inv = inv_freq.to(positions.device(), at::kFloat);
    at::Tensor freqs = positions.to(at::kFloat).unsqueeze(1) * inv.unsqueeze(0);  // [T, d/2]
    at::Tensor emb = at::cat({freqs, freqs}, -1);
    if (attention_factor == 1.0) return {emb.cos().to(dtype), emb.sin().to(dtype)};
    return {(emb.cos() * attention_factor).to(dtype), (emb.sin() * attention_factor).to(dtype)};
}

at::Tensor apply_rope(const at::Tensor& x, const RopeTables& rope) {
    return fused_rope_applies(x, rope) ? fused_rope(x, rope) : apply_rope_aten(x, rope);
}

at::Tensor apply_rope_aten(const at::Tensor& x, const RopeTables& rope) {
    const std::int64_t half = x.size(-1) / 2;
    at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
    at::Tensor rotated = at::cat({-x2, x1}, -1);
    return x * rope.cos.unsqueeze(1) + rotated * rope.sin.unsqueeze(1);
}

} // namespace hsring::model
