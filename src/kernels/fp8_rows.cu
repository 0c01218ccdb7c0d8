#include "kernels/fp8_rows.hpp"

#include "kernels/elements.cuh"

#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace hsring::kernels {
namespace {

constexpr int kThreads = 256;
constexpr float kE4M3Max = 448.f;
constexpr float kMinAmax = 1e-12f;  // as fp8_weights.cpp: a zero row quantises to zeros

__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// The block's max (Max) or sum of v, in every thread. `shared` holds kThreads / 32 floats and is
// free again when this returns.
template <bool Max> __device__ __forceinline__ float block_reduce(float v, float* shared) {
    v = Max ? warp_max(v) : warp_sum(v);
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < kThreads / 32 ? shared[threadIdx.x] : 0.f;
        v = Max ? warp_max(v) : warp_sum(v);
        if (threadIdx.x == 0) shared[0] = v;
    }
    __syncthreads();
    const float r = shared[0];
    __syncthreads();  // shared[] is reused by the next reduction
    return r;
}

// What the kernel quantises, a pack of VEC values at a time: fetch(row, i) reads pack i of the row
// (columns i * VEC .. + VEC - 1) as Raw, compute(raw, i, y) makes its VEC values. A Row with
// kNorm also gives sumsq(raw) and takes the row's sum of squares (norm(sum, cols)) first. kCache:
// how many packs per thread the kernel may hold in registers (0: read the row again each pass).

template <typename T, int VEC> struct Plain {  // y_j = x_j [* col_scale[j]]
    using Raw = Pack<T, VEC>;
    static constexpr bool kNorm = false;
    static constexpr int kCache = 8;  // rows up to 2,048 packs read once (96 registers: 2 blocks per SM)
    const float* col_scale;  // 4 * VEC-byte aligned (the launcher checks)
    __device__ Raw fetch(const T* row, long long i) const { return *reinterpret_cast<const Raw*>(row + i * VEC); }
    __device__ void compute(const Raw& p, long long i, float (&y)[VEC]) const {
        if (col_scale) {
            const Pack<float, VEC> c = *reinterpret_cast<const Pack<float, VEC>*>(col_scale + i * VEC);
#pragma unroll
            for (int k = 0; k < VEC; ++k) y[k] = __fmul_rn(to_f(p.v[k]), c.v[k]);
        } else {
#pragma unroll
            for (int k = 0; k < VEC; ++k) y[k] = to_f(p.v[k]);
        }
    }
};

template <typename T, int VEC> struct RmsNorm {  // y_j = T(x_j * rstd * w_j)
    using Raw = Pack<T, VEC>;
    static constexpr bool kNorm = true;
    static constexpr int kCache = 8;
    const T* weight;
    float eps;
    float rstd = 0.f;
    __device__ Raw fetch(const T* row, long long i) const { return *reinterpret_cast<const Raw*>(row + i * VEC); }
    __device__ float sumsq(const Raw& p) const {
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < VEC; ++k) s = fmaf(to_f(p.v[k]), to_f(p.v[k]), s);
        return s;
    }
    __device__ void norm(float sum, long long cols) {
        rstd = rsqrtf(__fadd_rn(__fmul_rn(sum, 1.f / static_cast<float>(cols)), eps));
    }
    __device__ void compute(const Raw& p, long long i, float (&y)[VEC]) const {
        const Pack<T, VEC> w = *reinterpret_cast<const Pack<T, VEC>*>(weight + i * VEC);
#pragma unroll
        for (int k = 0; k < VEC; ++k) y[k] = round_to<T>(__fmul_rn(__fmul_rn(to_f(p.v[k]), rstd), to_f(w.v[k])));
    }
};

template <typename T, int VEC> struct SwiGlu {  // row = [gate | up]: y_j = T(T(silu(g_j)) * u_j)
    struct Raw {
        Pack<T, VEC> g, u;
    };
    static constexpr bool kNorm = false;
    static constexpr int kCache = 0;  // two packs each: cached, 159 registers (one block per SM)
    long long cols;
    __device__ Raw fetch(const T* row, long long i) const {
        return {*reinterpret_cast<const Pack<T, VEC>*>(row + i * VEC),
                *reinterpret_cast<const Pack<T, VEC>*>(row + cols + i * VEC)};
    }
    __device__ void compute(const Raw& r, long long, float (&y)[VEC]) const {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const float x = to_f(r.g.v[k]);
            const float silu = silu_rounded<T>(x);
            y[k] = round_to<T>(__fmul_rn(silu, to_f(r.u.v[k])));
        }
    }
};

// CACHE > 0: the row (at most CACHE packs per thread) is read once into registers and every pass
// works from there; CACHE == 0: every pass reads the row again (long rows: the LM head's).
template <typename T, int VEC, int CACHE, typename Row>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const T* __restrict__ input, long long rows, long long cols, long long stride,
                         std::uint8_t* __restrict__ output, float* __restrict__ scale, Row op) {
    using Raw = typename Row::Raw;
    __shared__ float shared[kThreads / 32];
    const long long packs = cols / VEC;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* x = input + row * stride;
        Raw cache[CACHE > 0 ? CACHE : 1];
        // f(raw, i) for every pack i of this thread.
        auto each = [&](auto&& f) {
            if constexpr (CACHE > 0) {
#pragma unroll
                for (int c = 0; c < CACHE; ++c) {
                    const long long i = threadIdx.x + static_cast<long long>(c) * kThreads;
                    if (i < packs) f(cache[c], i);
                }
            } else {
                for (long long i = threadIdx.x; i < packs; i += kThreads) f(op.fetch(x, i), i);
            }
        };
        if constexpr (CACHE > 0) {
#pragma unroll
            for (int c = 0; c < CACHE; ++c) {
                const long long i = threadIdx.x + static_cast<long long>(c) * kThreads;
                if (i < packs) cache[c] = op.fetch(x, i);
            }
        }
        if constexpr (Row::kNorm) {
            float s = 0.f;
            each([&](const Raw& r, long long) { s += op.sumsq(r); });
            op.norm(block_reduce<false>(s, shared), cols);
        }
        float m = 0.f;
        float y[VEC];
        each([&](const Raw& r, long long i) {
            op.compute(r, i, y);
#pragma unroll
            for (int k = 0; k < VEC; ++k) m = fmaxf(m, fabsf(y[k]));
        });
        const float amax = fmaxf(block_reduce<true>(m, shared), kMinAmax);
        // ATen's order: reciprocal, then times 448 (fp8_weights.cpp), so both round alike.
        const float inv = __frcp_rn(amax) * kE4M3Max;
        if (threadIdx.x == 0) scale[row] = __fdiv_rn(amax, kE4M3Max);
        std::uint8_t* out = output + row * cols;
        each([&](const Raw& r, long long i) {
            op.compute(r, i, y);
            Pack<std::uint8_t, VEC> q;
#pragma unroll
            for (int k = 0; k < VEC; ++k)
                q.v[k] = static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(y[k] * inv, __NV_SATFINITE, __NV_E4M3));
            *reinterpret_cast<Pack<std::uint8_t, VEC>*>(out + i * VEC) = q;
        });
    }
}

template <typename T, int VEC, typename Row> void launch_row(const QuantizeRowsFp8Args& a, Row op) {
    const unsigned grid = static_cast<unsigned>(a.rows < 65535 ? a.rows : 65535);
    auto* stream = static_cast<cudaStream_t>(a.stream);
    const T* x = static_cast<const T*>(a.input);
    // Cached only for rows of 16 KiB and more: shorter ones re-read from L1/L2 at no cost, and the
    // cache's registers (two blocks per SM instead of six) made them slower (H200 trace: a bf16 row
    // of 4,096 took 60-80 us cached, 30-50 us re-read; of 12,288 with column scales ~120 vs ~280).
    if (Row::kCache > 0 && a.cols * static_cast<long long>(sizeof(T)) >= 16384 &&
        a.cols / VEC <= static_cast<long long>(Row::kCache) * kThreads)
        quantize_rows_kernel<T, VEC, Row::kCache><<<grid, kThreads, 0, stream>>>(x, a.rows, a.cols, a.row_stride, a.output,
                                                                            a.scale, op);
    else
        quantize_rows_kernel<T, VEC, 0><<<grid, kThreads, 0, stream>>>(x, a.rows, a.cols, a.row_stride, a.output,
                                                                       a.scale, op);
}

template <typename T, int VEC> int launch_vec(const QuantizeRowsFp8Args& a) {
    switch (a.prologue) {
    case RowPrologue::None: launch_row<T, VEC>(a, Plain<T, VEC>{a.col_scale}); return 0;
    case RowPrologue::RmsNorm:
        launch_row<T, VEC>(a, RmsNorm<T, VEC>{static_cast<const T*>(a.norm_weight), a.eps});
        return 0;
    case RowPrologue::SwiGlu: launch_row<T, VEC>(a, SwiGlu<T, VEC>{a.cols}); return 0;
    }
    return static_cast<int>(cudaErrorInvalidValue);
}

template <typename T> int launch(const QuantizeRowsFp8Args& a) {
    if (a.rows == 0) return 0;
    constexpr int kVec = kVec16<T>;
    // Packs of 16 bytes when every row (and the up half, the norm's weight, the column scales and
    // the output rows) starts where such a pack may.
    const auto aligned = [](const void* p, std::size_t n) { return reinterpret_cast<std::uintptr_t>(p) % n == 0; };
    const bool vec = a.cols % kVec == 0 && a.row_stride % kVec == 0 && aligned16(a.input) &&
                     aligned(a.output, kVec) && (a.prologue != RowPrologue::RmsNorm || aligned16(a.norm_weight)) &&
                     (a.col_scale == nullptr || aligned(a.col_scale, sizeof(float) * kVec));
    return vec ? launch_vec<T, kVec>(a) : launch_vec<T, 1>(a);
}

} // namespace

LaunchStatus quantize_rows_fp8(const QuantizeRowsFp8Args& a) {
    return launch_checked([&] {
        const std::int64_t width = a.prologue == RowPrologue::SwiGlu ? 2 * a.cols : a.cols;
        if (a.rows < 0 || a.cols <= 0 || a.row_stride < width) return static_cast<int>(cudaErrorInvalidValue);
        if (a.prologue == RowPrologue::RmsNorm && a.norm_weight == nullptr) return static_cast<int>(cudaErrorInvalidValue);
        if (a.prologue != RowPrologue::None && a.col_scale != nullptr) return static_cast<int>(cudaErrorInvalidValue);
        return with_element_type(a.dtype, [&](auto t) { return launch<decltype(t)>(a); });
    });
}

} // namespace hsring::kernels
