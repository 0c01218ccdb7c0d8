#pragma once
// Device helpers the kernels share: fp32 math on any element type, and packs of VEC elements
// loaded and stored as one access (16 bytes when VEC * sizeof(T) is).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace hsring::kernels {

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T, int VEC> struct alignas(sizeof(T) * VEC) Pack {
    T v[VEC];
};

// Elements per 16-byte access.
template <typename T> constexpr int kVec16 = 16 / sizeof(T);

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

} // namespace hsring::kernels
