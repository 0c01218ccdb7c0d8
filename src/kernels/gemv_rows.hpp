#pragma once
// y = x W^T for one activation row against a weight stored [out, in] (nn.Linear's layout), the
// decode step's projections at batch 1 (src/kernels/gemv_rows.cu). At one row a projection is a
// pure weight read: cuBLAS picked split-K GEMM tiles 16 rows tall and a second reduction kernel,
// reaching 2.0-2.8 TB/s of an H100's 3.0 TB/s copy bandwidth on Qwen3-8B's projections (BENCHMARKS.md,
// issue 35). Here each warp streams whole weight rows with 16-byte loads and reduces in fp32.
// Plain CUDA C++: no torch types cross this header.
#include "kernels/kernel_types.hpp"

#include <cstdint>

namespace hsring::kernels {

struct GemvArgs {
    const void* x = nullptr;       // [in] contiguous
    const void* weight = nullptr;  // [out, in] contiguous
    void* y = nullptr;             // [out]
    std::int64_t in = 0, out = 0;  // in: a multiple of 16 / sizeof(T), at most 48 KB of x; x and weight 16-byte aligned
    Dtype dtype = Dtype::BFloat16;
    void* stream = nullptr;        // cudaStream_t
};

// Whether gemv_rows takes these sizes and input pointers (y is not looked at: a caller asks before
// it allocates the output).
bool gemv_rows_supports(const GemvArgs& args);

// Enqueues it on args.stream (kernel_types.hpp: LaunchStatus says whose an error is).
LaunchStatus gemv_rows(const GemvArgs& args);

} // namespace hsring::kernels
