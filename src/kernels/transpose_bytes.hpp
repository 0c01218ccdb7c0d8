#pragma once
// A matrix of one-byte elements (e4m3) transposed: out[c][r] = in[r][c], in 64 x 64 tiles through
// shared memory, each thread moving 16 bytes in and 16 bytes out (src/kernels/transpose_bytes.cu).
//
// fp8_linear's dX multiplies by the forward's e4m3 weight bytes column-major; ATen's
// wq.t().contiguous() moved them one byte per thread at ~360 GB/s (5.9 ms of a 132 ms step in
// the H200 trace, BENCHMARKS.md).
// Plain CUDA C++: no torch types cross this header.
#include "kernels/kernel_types.hpp"

#include <cstdint>

namespace hsring::kernels {

struct TransposeBytesArgs {
    const std::uint8_t* input = nullptr;  // [rows, cols] row-major, 16-byte aligned
    std::int64_t rows = 0, cols = 0;      // both multiples of 16 (the 16-byte accesses)
    std::uint8_t* output = nullptr;       // [cols, rows] row-major, 16-byte aligned
    void* stream = nullptr;               // cudaStream_t
};

// Enqueues the transpose on args.stream (kernel_types.hpp: LaunchStatus says whose an error is);
// refuses (cudaErrorInvalidValue) dimensions or pointers the 16-byte accesses do not fit.
LaunchStatus transpose_bytes(const TransposeBytesArgs& args);

} // namespace hsring::kernels
