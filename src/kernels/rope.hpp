#pragma once
// Rotary position embedding in one pass over the activations (src/kernels/rope.cu).
//
// For one row (a token), one head and the half-split pairs (i, i + d/2) of its head_dim d:
//   forward   y[i]       = x[i] cos[i]             - x[i + d/2] sin[i]
//             y[i + d/2] = x[i + d/2] cos[i + d/2] + x[i] sin[i + d/2]
//   backward  (the transpose, for the input gradient g)
//             dx[i]       = g[i] cos[i]             + g[i + d/2] sin[i + d/2]
//             dx[i + d/2] = g[i + d/2] cos[i + d/2] - g[i] sin[i]
// which is transformers' x * cos + rotate_half(x) * sin, computed in fp32 and rounded once
// (ATen's composition rounds after each of its five ops).
//
// Plain CUDA C++: no torch types cross this header (the caller passes raw pointers, element
// strides and its current stream), so nvcc never compiles LibTorch's headers.
#include "kernels/kernel_types.hpp"

namespace hsring::kernels {

struct RopeArgs {
    const void* x = nullptr;    // [rows, heads, head_dim], last dim contiguous
    void* out = nullptr;        // [rows, heads, head_dim] contiguous; must not alias x
    const void* cos = nullptr;  // [rows, head_dim], last dim contiguous, x's dtype
    const void* sin = nullptr;
    std::int64_t rows = 0, heads = 0, head_dim = 0;     // head_dim even
    std::int64_t x_row_stride = 0, x_head_stride = 0;   // in elements
    std::int64_t table_row_stride = 0;                  // cos and sin alike, in elements
    bool transpose = false;                             // false: forward; true: the backward above
    Dtype dtype = Dtype::BFloat16;
    void* stream = nullptr;                             // cudaStream_t
};

// Enqueues the rotation on args.stream (kernel_types.hpp: LaunchStatus says whose an error is).
LaunchStatus rope(const RopeArgs& args);

} // namespace hsring::kernels
