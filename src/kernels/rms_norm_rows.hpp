#pragma once
// A residual add and the RMSNorm of its sum in one pass per row (src/kernels/rms_norm_rows.cu):
// the decode step's "h + o, then the next norm" (decode_step_ops.hpp) for rows of a few tokens,
// where ATen's add and layer-norm kernels (one 128-thread block per row) took ~8 us of launch
// and latency each per layer in the H100 trace of a batch-1 Qwen3-8B step.
//
// For one row x (and residual r) of width H, T = the tensors' dtype, fp32 math:
//   s = T(x + r)                              (ATen's add; s = x without a residual)
//   y = T(s * rsqrt(mean(s^2) + eps) * w)     (ATen's fused rms_norm on CUDA)
// Plain CUDA C++: no torch types cross this header.
#include "kernels/kernel_types.hpp"

#include <cstdint>

namespace hsring::kernels {

struct RmsNormRowsArgs {
    const void* x = nullptr;         // [rows, width] contiguous
    const void* residual = nullptr;  // [rows, width] contiguous, or null (no add)
    const void* weight = nullptr;    // [width], x's dtype
    void* sum = nullptr;             // [rows, width]: s; written only with a residual; aliases nothing
    void* out = nullptr;             // [rows, width]: y; must not alias x, residual or sum
    std::int64_t rows = 0, width = 0;
    float eps = 1e-6f;
    Dtype dtype = Dtype::BFloat16;
    void* stream = nullptr;          // cudaStream_t
};

// Enqueues it on args.stream (kernel_types.hpp: LaunchStatus says whose an error is).
LaunchStatus rms_norm_rows(const RmsNormRowsArgs& args);

} // namespace hsring::kernels
