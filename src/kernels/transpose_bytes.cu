#include "kernels/transpose_bytes.hpp"

#include "kernels/elements.cuh"

#include <cuda_runtime.h>

namespace hsring::kernels {
namespace {

constexpr int kTile = 64;             // a block moves a 64 x 64 byte tile
constexpr int kThreads = 256;         // 16 bytes each
constexpr int kStride = kTile + 4;    // shared row stride in bytes: 17 words, see the read below

__global__ void __launch_bounds__(kThreads)
    transpose_bytes_kernel(const std::uint8_t* __restrict__ in, long long rows, long long cols,
                           std::uint8_t* __restrict__ out) {
    __shared__ __align__(16) std::uint8_t tile[kTile * kStride];
    const long long r0 = static_cast<long long>(blockIdx.y) * kTile, c0 = static_cast<long long>(blockIdx.x) * kTile;
    const int t = threadIdx.x;
    {
        // In: thread t reads row t / 4, bytes (t % 4) * 16 .. + 15 (a warp: 8 rows of 64 bytes).
        const int r = t >> 2, c = (t & 3) * 16;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r0 + r < rows && c0 + c < cols) v = *reinterpret_cast<const uint4*>(in + (r0 + r) * cols + c0 + c);
        auto* s = reinterpret_cast<unsigned*>(tile + r * kStride + c);  // 4-byte aligned: kStride % 4 == 0
        s[0] = v.x;
        s[1] = v.y;
        s[2] = v.z;
        s[3] = v.w;
    }
    __syncthreads();
    // Out: thread t writes output row c0 + t % 64 (input column), bytes = input rows (t / 64) * 16
    // .. + 15. A warp's 32 columns for one input row lie in 8 consecutive words: one per bank, no
    // conflict (the 17-word row stride keeps the 16 rows a thread reads apart as well).
    const int c = t & 63, r = (t >> 6) * 16;
    if (c0 + c >= cols || r0 + r >= rows) return;  // rows % 16 == 0: the 16 rows are all in or all out
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const std::uint8_t* p = tile + (r + 4 * i) * kStride + c;
        w[i] = static_cast<unsigned>(p[0]) | static_cast<unsigned>(p[kStride]) << 8 |
               static_cast<unsigned>(p[2 * kStride]) << 16 | static_cast<unsigned>(p[3 * kStride]) << 24;
    }
    *reinterpret_cast<uint4*>(out + (c0 + c) * rows + r0 + r) = make_uint4(w[0], w[1], w[2], w[3]);
}

} // namespace

LaunchStatus transpose_bytes(const TransposeBytesArgs& a) {
    return launch_checked([&] {
        if (a.rows < 0 || a.cols < 0 || a.rows % 16 != 0 || a.cols % 16 != 0 || !aligned16(a.input) ||
            !aligned16(a.output))
            return static_cast<int>(cudaErrorInvalidValue);
        if (a.rows == 0 || a.cols == 0) return 0;
        const long long gy = (a.rows + kTile - 1) / kTile;
        if (gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
        const dim3 grid(static_cast<unsigned>((a.cols + kTile - 1) / kTile), static_cast<unsigned>(gy));
        transpose_bytes_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(a.stream)>>>(a.input, a.rows, a.cols,
                                                                                           a.output);
        return 0;  // launch_checked() reads the launch's own error
    });
}

} // namespace hsring::kernels
