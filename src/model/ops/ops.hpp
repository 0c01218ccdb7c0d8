#pragma once
// The decoder building blocks Qwen3 and Llama share, written to match HF transformers' numerics
// (RMSNorm upcasts to fp32 and rounds once before the weight; RoPE tables are built in fp32).
// Weights may be stored in another dtype than the activations (fp32 master weights under bf16
// compute): they are cast to the activation dtype, differentiably.
#include "hsring/model_shape.hpp"

#include <ATen/core/Tensor.h>

#include <utility>

namespace hsring::model {

// w cast to x's dtype when they differ.
at::Tensor as_dtype_of(const at::Tensor& w, const at::Tensor& x);

// x @ w^T (no bias), w cast to x's dtype.
at::Tensor dense(const at::Tensor& x, const at::Tensor& w);

// HF RMSNorm over the last dim: w * (x.float() * rsqrt(mean(x^2) + eps)).to(x.dtype).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps);

// silu(gate) * up for gate_up = [.., 2*I] (gate first, as a fused gate|up projection gives).
at::Tensor swiglu(const at::Tensor& gate_up);

// Rotary embedding frequencies [head_dim/2] in fp32: theta^(-2i/d), with Llama-3, linear or YaRN
// scaling when `scaling.type` says so (transformers' _compute_llama3_parameters, yarn_rope.hpp).
at::Tensor rope_inv_freq(std::int64_t head_dim, double theta, const RopeScaling& scaling);
// The factor cos and sin are multiplied by (YaRN's attention factor; 1 otherwise): a formula of
// the scaling, cheap enough for every rope_tables call.
double rope_attention_factor(const RopeScaling& scaling);

struct RopeTables {
    at::Tensor cos;  // [T, head_dim], dtype of the activations
    at::Tensor sin;
};
// Tables for integer positions [T] (any device; inv_freq is moved there).
// cos and sin are multiplied by attention_factor in fp32 before the cast, as transformers does.
RopeTables rope_tables(const at::Tensor& inv_freq, const at::Tensor& positions, at::ScalarType dtype,
                       double attention_factor = 1.0);

// x [T, heads, head_dim] rotated by its row's position: x*cos + rotate_half(x)*sin. On the GPU
// one fused kernel each way (fused_rope.hpp: fp32 math, one rounding), elsewhere apply_rope_aten.
at::Tensor apply_rope(const at::Tensor& x, const RopeTables& rope);

// The same as ATen ops, rounding after each as transformers does (the CPU path, and the
// reference the GPU tests hold the fused kernel to).
at::Tensor apply_rope_aten(const at::Tensor& x, const RopeTables& rope);

} // namespace hsring::model
