#include "kernels/gemv_rows.hpp"

#include "kernels/block_reduce.cuh"
#include "kernels/elements.cuh"

#include <cuda_runtime.h>

namespace hsring::kernels {
namespace {

constexpr int kWarps = 8;        // per block
constexpr int kRowsPerWarp = 2;  // weight rows a warp streams side by side (loads in flight)
constexpr int kMaxSharedBytes = 48 * 1024;  // x is staged in shared memory (no opt-in needed)

// Weights are read once per step: a streaming load that does not keep them in L1.
template <typename P> __device__ __forceinline__ P load_stream(const P* p) {
    P v;
    *reinterpret_cast<int4*>(&v) = __ldcs(reinterpret_cast<const int4*>(p));
    return v;
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                          T* __restrict__ y, int in, long long out) {
    constexpr int VEC = kVec16<T>;
    using P = Pack<T, VEC>;
    extern __shared__ __align__(16) unsigned char shared[];
    T* xs = reinterpret_cast<T*>(shared);
    const int packs = in / VEC;
    for (int i = threadIdx.x; i < packs; i += blockDim.x)
        reinterpret_cast<P*>(xs)[i] = reinterpret_cast<const P*>(x)[i];
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long long first = (static_cast<long long>(blockIdx.x) * kWarps + warp) * kRowsPerWarp;
    float acc[kRowsPerWarp] = {};
    const P* rows[kRowsPerWarp];
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {
        const long long row = first + k < out ? first + k : out - 1;  // a clamped row is computed, not stored
        rows[k] = reinterpret_cast<const P*>(w + row * in);
    }
#pragma unroll 2
    for (int i = lane; i < packs; i += 32) {
        const P xv = reinterpret_cast<const P*>(xs)[i];
        P wv[kRowsPerWarp];
#pragma unroll
        for (int k = 0; k < kRowsPerWarp; ++k) wv[k] = load_stream(rows[k] + i);
#pragma unroll
        for (int k = 0; k < kRowsPerWarp; ++k)
#pragma unroll
            for (int e = 0; e < VEC; ++e) acc[k] += to_f(xv.v[e]) * to_f(wv[k].v[e]);
    }
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {
        const float s = warp_sum(acc[k]);
        if (lane == 0 && first + k < out) y[first + k] = from_f<T>(s);
    }
}

template <typename T> bool supports(const GemvArgs& a) {
    return a.in > 0 && a.in * static_cast<long long>(sizeof(T)) <= kMaxSharedBytes && a.in % kVec16<T> == 0 && a.out > 0 && a.out < (1LL << 40) && a.x && a.weight &&
           aligned16(a.x) && aligned16(a.weight);
}

template <typename T> int launch(const GemvArgs& a) {
    if (!supports<T>(a) || !a.y) return static_cast<int>(cudaErrorInvalidValue);
    const long long per_block = static_cast<long long>(kWarps) * kRowsPerWarp;
    const long long blocks = (a.out + per_block - 1) / per_block;
    if (blocks > (1LL << 31) - 1) return static_cast<int>(cudaErrorInvalidValue);
    const int bytes = static_cast<int>(a.in * sizeof(T));
    gemv_kernel<T><<<static_cast<unsigned>(blocks), kWarps * 32, bytes, static_cast<cudaStream_t>(a.stream)>>>(
        static_cast<const T*>(a.x), static_cast<const T*>(a.weight), static_cast<T*>(a.y), static_cast<int>(a.in), a.out);
    return 0;  // launch_checked() reads the launch's own error
}

} // namespace

bool gemv_rows_supports(const GemvArgs& a) {
    return with_element_type(a.dtype, [&](auto t) { return supports<decltype(t)>(a) ? 1 : 0; }) == 1;
}

LaunchStatus gemv_rows(const GemvArgs& a) {
    return launch_checked([&] { return with_element_type(a.dtype, [&](auto t) { return launch<decltype(t)>(a); }); });
}

} // namespace hsring::kernels
