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

template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const T* __restrict__ input, long long rows, long long cols, long long stride,
                         std::uint8_t* __restrict__ output, float* __restrict__ scale) {
    using P = Pack<T, VEC>;
    __shared__ float shared[kThreads / 32];
    const long long packs = cols / VEC;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* x = input + row * stride;
        float m = 0.f;
        for (long long i = threadIdx.x; i < packs; i += blockDim.x) {
            const P v = *reinterpret_cast<const P*>(x + i * VEC);
#pragma unroll
            for (int k = 0; k < VEC; ++k) m = fmaxf(m, fabsf(to_f(v.v[k])));
        }
        m = warp_max(m);
        if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = m;
        __syncthreads();
        if (threadIdx.x < 32) {
            m = warp_max(threadIdx.x < kThreads / 32 ? shared[threadIdx.x] : 0.f);
            if (threadIdx.x == 0) shared[0] = m;
        }
        __syncthreads();
        const float amax = fmaxf(shared[0], kMinAmax);
        __syncthreads();  // shared[] is reused by the next row
        // ATen's order: reciprocal, then times 448 (fp8_weights.cpp), so both round alike.
        const float inv = __frcp_rn(amax) * kE4M3Max;
        if (threadIdx.x == 0) scale[row] = __fdiv_rn(amax, kE4M3Max);
        std::uint8_t* out = output + row * cols;
        for (long long i = threadIdx.x; i < packs; i += blockDim.x) {
            const P v = *reinterpret_cast<const P*>(x + i * VEC);
            std::uint8_t q[VEC];
#pragma unroll
            for (int k = 0; k < VEC; ++k)
                q[k] = static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(to_f(v.v[k]) * inv, __NV_SATFINITE, __NV_E4M3));
#pragma unroll
            for (int k = 0; k < VEC; ++k) out[i * VEC + k] = q[k];
        }
    }
}

template <typename T> int launch(const QuantizeRowsFp8Args& a) {
    if (a.rows == 0) return 0;
    constexpr int kVec = kVec16<T>;
    const bool vec = a.cols % kVec == 0 && a.row_stride % kVec == 0 && aligned16(a.input);
    const unsigned grid = static_cast<unsigned>(a.rows < 65535 ? a.rows : 65535);
    auto* stream = static_cast<cudaStream_t>(a.stream);
    const T* x = static_cast<const T*>(a.input);
    if (vec)
        quantize_rows_kernel<T, kVec><<<grid, kThreads, 0, stream>>>(x, a.rows, a.cols, a.row_stride, a.output, a.scale);
    else
        quantize_rows_kernel<T, 1><<<grid, kThreads, 0, stream>>>(x, a.rows, a.cols, a.row_stride, a.output, a.scale);
    return 0;  // launch_checked() reads the launch's own error
}

} // namespace

LaunchStatus quantize_rows_fp8(const QuantizeRowsFp8Args& a) {
    return launch_checked([&] {
        if (a.rows < 0 || a.cols <= 0 || a.row_stride < a.cols) return static_cast<int>(cudaErrorInvalidValue);
        return with_element_type(a.dtype, [&](auto t) { return launch<decltype(t)>(a); });
    });
}

} // namespace hsring::kernels
