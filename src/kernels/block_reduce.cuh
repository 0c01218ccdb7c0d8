#pragma once
// Warp and block reductions of one float per thread, for kernels of any block size that is a
// multiple of 32 (up to 1,024).
#include <cuda_runtime.h>

namespace hsring::kernels {

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// The sum of v over the block, in every thread. scratch: 32 floats of shared memory, free again
// when this returns. Every thread of the block must call it.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int warps = (blockDim.x + 31) / 32;
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < warps ? scratch[threadIdx.x] : 0.f;
        v = warp_sum(v);
        if (threadIdx.x == 0) scratch[0] = v;
    }
    __syncthreads();
    const float r = scratch[0];
    __syncthreads();  // scratch is reused by the next reduction
    return r;
}

} // namespace hsring::kernels
