#include "kernels/cross_entropy_rows.hpp"

#include "kernels/elements.cuh"

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>

namespace hsring::kernels {
namespace {

constexpr int kThreads = 1024;
constexpr float kE4M3Max = 448.f;
constexpr float kMinAmax = 1e-12f;  // as fp8_weights.cpp

// A partial softmax of some of a row's entries: max m, the first index holding it, and the sum of
// exp(x - m) over those entries except the label; mo: the max over those entries except the label.
struct Partial {
    float m;
    long long arg;
    float s;
    float mo;
};

__device__ __forceinline__ Partial combine(Partial a, Partial b) {
    if (b.m > a.m || (b.m == a.m && b.arg < a.arg)) {
        Partial t = a;
        a = b;
        b = t;
    }
    // a holds the larger max (the lower index on ties); rescale b's sum to it. An empty partial
    // (m = -inf, s = 0) adds nothing; exp(-inf - -inf) is never taken.
    const float bs = b.s == 0.f ? 0.f : b.s * __expf(b.m - a.m);
    return {a.m, a.arg, a.s + bs, fmaxf(a.mo, b.mo)};
}

// Folds VEC entries starting at index j into p.
template <typename T, int VEC>
__device__ __forceinline__ void fold(Partial& p, const Pack<T, VEC>& v, long long j, long long label) {
    float x[VEC];
    float vm = -INFINITY;
    int vi = 0;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        x[k] = to_f(v.v[k]);
        if (x[k] > vm) {
            vm = x[k];
            vi = k;
        }
        if (j + k != label) p.mo = fmaxf(p.mo, x[k]);
    }
    if (vm > p.m) {
        p.s = p.s == 0.f ? 0.f : p.s * __expf(p.m - vm);
        p.m = vm;
        p.arg = j + vi;
    }
    if (p.m == -INFINITY) return;  // only -inf so far: nothing to add
    float add = 0.f;
#pragma unroll
    for (int k = 0; k < VEC; ++k)
        if (j + k != label) add += __expf(x[k] - p.m);
    p.s += add;
}

// The warp's partials combined into lane 0's.
__device__ __forceinline__ Partial warp_reduce(Partial p) {
    for (int off = 16; off > 0; off >>= 1) {
        Partial o{__shfl_down_sync(0xffffffffu, p.m, off), __shfl_down_sync(0xffffffffu, p.arg, off),
                  __shfl_down_sync(0xffffffffu, p.s, off), __shfl_down_sync(0xffffffffu, p.mo, off)};
        p = combine(p, o);
    }
    return p;
}

__device__ Partial block_reduce(Partial p, Partial* shared) {
    p = warp_reduce(p);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) shared[warp] = p;
    __syncthreads();
    if (warp == 0) {
        p = warp_reduce(lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : Partial{-INFINITY, 0, 0.f, -INFINITY});
        if (lane == 0) shared[0] = p;
    }
    __syncthreads();
    const Partial r = shared[0];
    __syncthreads();  // shared[] is reused by the next row
    return r;
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_rows_kernel(T* __restrict__ logits, long long rows, long long vocab, long long stride,
                              const long long* __restrict__ labels, float* __restrict__ loss,
                              std::uint8_t* __restrict__ correct, bool write_grad, std::uint8_t* __restrict__ grad_fp8,
                              float* __restrict__ grad_scale) {
    using P = Pack<T, VEC>;
    __shared__ Partial shared[kThreads / 32];
    const long long packs = vocab / VEC;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        T* x = logits + row * stride;
        const long long y = labels[row];
        const bool label_ok = y >= 0 && y < vocab;
        Partial p{-INFINITY, 0, 0.f, -INFINITY};
        for (long long i = threadIdx.x; i < packs; i += blockDim.x)
            fold<T, VEC>(p, *reinterpret_cast<const P*>(x + i * VEC), i * VEC, y);
        const Partial r = block_reduce(p, shared);
        const float xy = label_ok ? to_f(x[y]) : NAN;
        const float ey = __expf(xy - r.m);
        const float s_all = r.s + ey;
        if (threadIdx.x == 0) {
            loss[row] = (r.m - xy) + logf(s_all);
            correct[row] = label_ok && r.arg == y;
        }
        if (!write_grad) continue;
        const float inv = 1.f / s_all, minus_rest = -r.s * inv;
        if (grad_fp8) {
            // The largest |g_j|: the largest other entry's p_j, or |p_label - 1| (the same fp32
            // expressions as the values below; a value a rounding above amax saturates at 448).
            const float amax = fmaxf(fmaxf(__expf(r.mo - r.m) * inv, -minus_rest), kMinAmax);
            const float q = __frcp_rn(amax) * kE4M3Max;
            if (threadIdx.x == 0) grad_scale[row] = __fdiv_rn(amax, kE4M3Max);
            std::uint8_t* out = grad_fp8 + row * vocab;
            for (long long i = threadIdx.x; i < packs; i += blockDim.x) {
                const P v = *reinterpret_cast<const P*>(x + i * VEC);
                Pack<std::uint8_t, VEC> b;
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const long long j = i * VEC + k;
                    const float g = j == y ? minus_rest : __expf(to_f(v.v[k]) - r.m) * inv;
                    b.v[k] = static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(g * q, __NV_SATFINITE, __NV_E4M3));
                }
                *reinterpret_cast<Pack<std::uint8_t, VEC>*>(out + i * VEC) = b;
            }
            continue;
        }
        __syncthreads();  // every thread has read x[y] before its entry is overwritten
        for (long long i = threadIdx.x; i < packs; i += blockDim.x) {
            P v = *reinterpret_cast<const P*>(x + i * VEC);
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const long long j = i * VEC + k;
                v.v[k] = from_f<T>(j == y ? minus_rest : __expf(to_f(v.v[k]) - r.m) * inv);
            }
            *reinterpret_cast<P*>(x + i * VEC) = v;
        }
    }
}

template <typename T> int launch(const CrossEntropyRowsArgs& a) {
    if (a.rows == 0) return 0;
    constexpr int kVec = kVec16<T>;
    const bool vec = a.vocab % kVec == 0 && a.row_stride % kVec == 0 && aligned16(a.logits) &&
                     (a.grad_fp8 == nullptr || reinterpret_cast<std::uintptr_t>(a.grad_fp8) % kVec == 0);
    const unsigned grid = static_cast<unsigned>(a.rows < 65535 ? a.rows : 65535);
    auto* stream = static_cast<cudaStream_t>(a.stream);
    T* x = static_cast<T*>(a.logits);
    const auto* labels = reinterpret_cast<const long long*>(a.labels);
    if (vec)
        cross_entropy_rows_kernel<T, kVec><<<grid, kThreads, 0, stream>>>(x, a.rows, a.vocab, a.row_stride, labels,
                                                                         a.loss, a.correct, a.write_grad, a.grad_fp8,
                                                                         a.grad_scale);
    else
        cross_entropy_rows_kernel<T, 1><<<grid, kThreads, 0, stream>>>(x, a.rows, a.vocab, a.row_stride, labels,
                                                                      a.loss, a.correct, a.write_grad, a.grad_fp8,
                                                                         a.grad_scale);
    return 0;  // launch_checked() reads the launch's own error
}

} // namespace

LaunchStatus cross_entropy_rows(const CrossEntropyRowsArgs& a) {
    return launch_checked([&] {
        if (a.rows < 0 || a.vocab <= 0 || a.row_stride < a.vocab) return static_cast<int>(cudaErrorInvalidValue);
        if (a.grad_fp8 != nullptr && (!a.write_grad || a.grad_scale == nullptr)) return static_cast<int>(cudaErrorInvalidValue);
        return with_element_type(a.dtype, [&](auto t) { return launch<decltype(t)>(a); });
    });
}

} // namespace hsring::kernels
