#pragma once
// y = x W^T for 1-16 activation rows against a weight stored [out, in] (nn.Linear's layout): the
// decode step's projections at batch 1 (one row for plain decoding, up to 16 for a verify step).
// At so few rows a projection is a pure weight read. cuBLAS picked split-K GEMM tiles and a second
// reduction kernel, 2.0-2.8 TB/s of an H100's 3.0 TB/s copy bandwidth on Qwen3-8B's projections
// (BENCHMARKS.md, issue 35). Two kernels (src/kernels/gemv_rows.cu):
//   - Simt: one row, each warp streams whole weight rows with 16-byte loads, fp32 FMAs (any dtype);
//   - TensorCores (bf16 / fp16, sm_80+): rows padded to one 16-row mma tile, each weight element
//     read once for all rows; fp32 accumulators. Row r's result depends on row r only, in the same
//     order whatever `rows` is: a 1-row step and a 16-row verify step compute a token's
//     projections bit for bit alike (greedy speculative decoding equals plain decoding in bf16).
// Plain CUDA C++: no torch types cross this header.
#include "kernels/kernel_types.hpp"

#include <cstdint>

namespace hsring::kernels {

enum class GemvKernel : std::uint8_t {
    Auto,         // TensorCores for bf16 / fp16 (Simt for one row it does not take), Simt for fp32
    Simt,         // rows == 1 only
    TensorCores,  // bf16 / fp16 only
};

constexpr std::int64_t kGemvMaxRows = 16;

struct GemvArgs {
    const void* x = nullptr;       // [rows, in] contiguous
    const void* weight = nullptr;  // [out, in] contiguous
    void* y = nullptr;             // [rows, out] contiguous
    std::int64_t rows = 1;         // 1..kGemvMaxRows
    std::int64_t in = 0, out = 0;  // in: a multiple of 32 elements (Simt: 16 bytes, at most 48 KB); x and weight 16-byte aligned
    Dtype dtype = Dtype::BFloat16;
    GemvKernel kernel = GemvKernel::Auto;
    void* stream = nullptr;        // cudaStream_t
};

// The kernel Auto stands for (others: themselves).
GemvKernel gemv_kernel_for(const GemvArgs& args);

// Whether gemv_rows takes these sizes and input pointers (y is not looked at: a caller asks before
// it allocates the output). TensorCores also needs a device of compute capability 8.0 or newer.
bool gemv_rows_supports(const GemvArgs& args);

// Enqueues it on args.stream (kernel_types.hpp: LaunchStatus says whose an error is).
LaunchStatus gemv_rows(const GemvArgs& args);

} // namespace hsring::kernels
