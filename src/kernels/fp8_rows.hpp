#pragma once
// Per-row (per-token) FP8 quantisation of activations in one kernel (src/kernels/fp8_rows.cu):
// one CUDA block per row,
//
//   read 1  amax = max |x_j| over the row (fp32)
//   read 2  out_j = e4m3(x_j * inv), inv = (1 / max(amax, 1e-12)) * 448 (fp32, round to nearest,
//           saturating at 448); scale[row] = max(amax, 1e-12) / 448
//
// the same arithmetic as model/fp8_weights.cpp's ATen composition (a norm, a reciprocal, a
// multiply cast on the store, a divide: four kernels and a temporary), bit for bit.
// Plain CUDA C++: no torch types cross this header.
#include "kernels/kernel_types.hpp"

namespace hsring::kernels {

struct QuantizeRowsFp8Args {
    const void* input = nullptr;     // [rows, cols], last dim contiguous
    std::int64_t rows = 0, cols = 0, row_stride = 0;  // stride in elements
    std::uint8_t* output = nullptr;  // [rows, cols] float8_e4m3fn, contiguous
    float* scale = nullptr;          // [rows]: the row's dequantisation scale
    Dtype dtype = Dtype::BFloat16;
    void* stream = nullptr;          // cudaStream_t
};

// Enqueues the rows on args.stream (kernel_types.hpp: LaunchStatus says whose an error is).
LaunchStatus quantize_rows_fp8(const QuantizeRowsFp8Args& args);

} // namespace hsring::kernels
