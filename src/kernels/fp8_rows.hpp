#pragma once
// Per-row (per-token) FP8 quantisation of activations in one kernel (src/kernels/fp8_rows.cu):
// one CUDA block per row,
//
//   read 1  amax = max |y_j| over the row (fp32)
//   read 2  out_j = e4m3(y_j * inv), inv = (1 / max(amax, 1e-12)) * 448 (fp32, round to nearest,
//           saturating at 448); scale[row] = max(amax, 1e-12) / 448
//
// (None and RmsNorm rows of up to 2,048 16-byte packs come from memory once, into registers; the
// passes read them there) where y is the row itself, or what a prologue makes of it in the same
// reads (its result never written to memory):
//
//   None     y_j = x_j, or x_j * col_scale[j] (fp32 product) when col_scale is given
//   RmsNorm  y_j = T(x_j * rstd * w_j), rstd = 1 / sqrt(mean_j x_j^2 + eps) in fp32 (a third read
//            first): model/ops/ops.hpp rms_norm as at::rms_norm computes it on the GPU (one fused
//            kernel, one rounding to T = the rows' dtype; its CPU composition rounds x_j * rstd first)
//   SwiGlu   the input row is [gate | up], 2 * cols wide: y_j = T(T(silu(g_j)) * u_j), silu(g) =
//            g / (1 + exp(-g)) in fp32: model/ops/ops.hpp swiglu, as at::silu and the product round
//
// With None the arithmetic is model/ops/fp8_weights.cpp's ATen composition (a norm, a reciprocal, a
// multiply cast on the store, a divide: four kernels and a temporary), bit for bit; the
// prologues round where ATen's kernels do, their reductions (the norm's mean) in another order.
// Plain CUDA C++: no torch types cross this header.
#include "kernels/kernel_types.hpp"

namespace hsring::kernels {

enum class RowPrologue : std::uint8_t { None, RmsNorm, SwiGlu };

struct QuantizeRowsFp8Args {
    const void* input = nullptr;     // [rows, cols] ([rows, 2 * cols] for SwiGlu), last dim contiguous
    std::int64_t rows = 0, cols = 0, row_stride = 0;  // cols of the output; stride in elements
    std::uint8_t* output = nullptr;  // [rows, cols] float8_e4m3fn, contiguous
    float* scale = nullptr;          // [rows]: the row's dequantisation scale
    const float* col_scale = nullptr;  // None: [cols] or null: quantise x_j * col_scale[j] (fp32 product)
    RowPrologue prologue = RowPrologue::None;
    const void* norm_weight = nullptr;  // RmsNorm: [cols] in the rows' dtype
    float eps = 0.f;                    // RmsNorm
    Dtype dtype = Dtype::BFloat16;
    void* stream = nullptr;          // cudaStream_t
};

// Enqueues the rows on args.stream (kernel_types.hpp: LaunchStatus says whose an error is).
LaunchStatus quantize_rows_fp8(const QuantizeRowsFp8Args& args);

} // namespace hsring::kernels
