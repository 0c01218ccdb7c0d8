#pragma once
// Device helpers the kernels share: fp32 math on any element type, and packs of VEC elements
// loaded and stored as one access (16 bytes when VEC * sizeof(T) is).
#include "kernels/kernel_types.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hsring::kernels {

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// v stored as a T and read back: where ATen rounds an intermediate tensor of dtype T (fp32: v).
template <typename T> __device__ __forceinline__ float round_to(float v) { return to_f(from_f<T>(v)); }
template <> __device__ __forceinline__ float round_to<float>(float v) { return v; }

// silu(x) = x / (1 + exp(-x)) as ATen's silu kernel computes it, its output rounded to T.
template <typename T> __device__ __forceinline__ float silu_rounded(float x) {
    return round_to<T>(__fdiv_rn(x, __fadd_rn(1.f, expf(-x))));
}

template <typename T, int VEC> struct alignas(sizeof(T) * VEC) Pack {
    T v[VEC];
};

// Elements per 16-byte access.
template <typename T> constexpr int kVec16 = 16 / sizeof(T);

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// f(T{}) with the element type T of `dtype` (float, __half or __nv_bfloat16): a launcher's one
// switch over the kernels' dtypes. f returns an int (a launch: 0 or a cudaError_t).
template <typename F> int with_element_type(Dtype dtype, F&& f) {
    switch (dtype) {
    case Dtype::Float32: return f(float{});
    case Dtype::Float16: return f(__half{});
    case Dtype::BFloat16: return f(__nv_bfloat16{});
    }
    return static_cast<int>(cudaErrorInvalidValue);
}

// A launcher's checks and launch: `enqueue` checks the arguments and launches (returns 0, or the
// cudaError_t of an argument it refuses). An error already pending on this thread is reported as
// earlier and nothing is launched: after the launch, cudaGetLastError() would return (and clear)
// it as if this launch had failed. Then the launch's own error.
template <typename F> LaunchStatus launch_checked(F&& enqueue) {
    if (const cudaError_t pending = cudaPeekAtLastError(); pending != cudaSuccess)
        return {static_cast<int>(pending), true};
    if (const int refused = enqueue(); refused != 0) return {refused, false};
    return {static_cast<int>(cudaGetLastError()), false};
}

} // namespace hsring::kernels
