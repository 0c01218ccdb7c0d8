#include "kernels/rms_norm_rows.hpp"

#include "kernels/block_reduce.cuh"
#include "kernels/elements.cuh"

#include <cuda_runtime.h>

namespace hsring::kernels {
namespace {

// One block per row. Pass 1 forms s (stored when there is a residual) and its sum of squares;
// pass 2 re-reads s (this thread's own elements, just written or x itself) and writes y.
template <typename T, int VEC>
__global__ void rms_norm_rows_kernel(const T* __restrict__ x, const T* __restrict__ residual, const T* __restrict__ w,
                                     T* sum, T* __restrict__ out, int width, float eps) {
    using P = Pack<T, VEC>;
    const long long row = blockIdx.x;
    const T* xr = x + row * width;
    const T* rr = residual ? residual + row * width : nullptr;
    T* sr = residual ? sum + row * width : nullptr;
    float squares = 0.f;
    for (int i = threadIdx.x * VEC; i < width; i += blockDim.x * VEC) {
        P a = *reinterpret_cast<const P*>(xr + i);
        if (rr) {
            const P b = *reinterpret_cast<const P*>(rr + i);
#pragma unroll
            for (int k = 0; k < VEC; ++k) a.v[k] = from_f<T>(to_f(a.v[k]) + to_f(b.v[k]));
            *reinterpret_cast<P*>(sr + i) = a;
        }
#pragma unroll
        for (int k = 0; k < VEC; ++k) squares += to_f(a.v[k]) * to_f(a.v[k]);
    }
    __shared__ float scratch[32];
    const float total = block_sum(squares, scratch);
    const float rstd = rsqrtf(total / static_cast<float>(width) + eps);
    const T* s = rr ? sr : xr;
    T* o = out + row * width;
    for (int i = threadIdx.x * VEC; i < width; i += blockDim.x * VEC) {
        const P a = *reinterpret_cast<const P*>(s + i), g = *reinterpret_cast<const P*>(w + i);
        P y;
#pragma unroll
        for (int k = 0; k < VEC; ++k) y.v[k] = from_f<T>(to_f(a.v[k]) * rstd * to_f(g.v[k]));
        *reinterpret_cast<P*>(o + i) = y;
    }
}

template <typename T> int launch(const RmsNormRowsArgs& a) {
    if (a.rows == 0) return 0;
    constexpr int kVec = kVec16<T>;
    const bool vec = a.width % kVec == 0 && aligned16(a.x) && aligned16(a.weight) && aligned16(a.out) &&
                     (!a.residual || (aligned16(a.residual) && aligned16(a.sum)));
    const int per_thread = vec ? kVec : 1;
    // Enough threads that each holds one or two packs of a Qwen3-8B row (4,096 wide): the row
    // is latency-bound, not bandwidth-bound.
    int threads = static_cast<int>((a.width / per_thread + 1) / 2);
    threads = threads < 32 ? 32 : threads > 1024 ? 1024 : (threads + 31) / 32 * 32;
    const unsigned grid = static_cast<unsigned>(a.rows);
    auto* stream = static_cast<cudaStream_t>(a.stream);
    const T* x = static_cast<const T*>(a.x);
    const T* r = static_cast<const T*>(a.residual);
    const T* w = static_cast<const T*>(a.weight);
    T* s = static_cast<T*>(a.sum);
    T* o = static_cast<T*>(a.out);
    const int width = static_cast<int>(a.width);
    if (vec)
        rms_norm_rows_kernel<T, kVec><<<grid, threads, 0, stream>>>(x, r, w, s, o, width, a.eps);
    else
        rms_norm_rows_kernel<T, 1><<<grid, threads, 0, stream>>>(x, r, w, s, o, width, a.eps);
    return 0;  // launch_checked() reads the launch's own error
}

} // namespace

LaunchStatus rms_norm_rows(const RmsNormRowsArgs& a) {
    return launch_checked([&] {
        if (a.rows < 0 || a.width <= 0 || a.width > (1LL << 30) || a.rows > (1LL << 31) - 1 || !a.x || !a.weight ||
            !a.out || (a.residual && !a.sum))
            return static_cast<int>(cudaErrorInvalidValue);
        return with_element_type(a.dtype, [&](auto t) { return launch<decltype(t)>(a); });
    });
}

} // namespace hsring::kernels
