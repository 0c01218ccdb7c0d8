#include "kernels/block_attention_bias.hpp"

#include "kernels/elements.cuh"

#include <cuda_runtime.h>

#include <cmath>

namespace hsring::kernels {
namespace {

constexpr int kThreads = 256;

// blockIdx.y strides over the groups; each thread writes VEC consecutive columns of one row.
template <typename T, int VEC>
__global__ void block_bias_kernel(T* __restrict__ out, const long long* __restrict__ groups, long long num_groups,
                                  const long long* __restrict__ ctx_end, const long long* __restrict__ own_begin,
                                  long long block) {
    const T visible = from_f<T>(0.f), hidden = from_f<T>(-INFINITY);
    for (long long gi = blockIdx.y; gi < num_groups; gi += gridDim.y) {
        const long long* g = groups + 4 * gi;
        const long long offset = g[0], mask_row = g[1], rows = g[2], key_len = g[3];
        const long long packs_per_row = key_len / VEC, packs = rows * packs_per_row;
        for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < packs;
             i += static_cast<long long>(gridDim.x) * blockDim.x) {
            const long long r = i / packs_per_row, c0 = (i % packs_per_row) * VEC;
            const long long end = ctx_end[mask_row + r], own = own_begin[mask_row + r];
            Pack<T, VEC> p;
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const long long c = c0 + k;
                p.v[k] = (c < end || (c >= own && c < own + block)) ? visible : hidden;
            }
            *reinterpret_cast<Pack<T, VEC>*>(out + offset + r * key_len + c0) = p;
        }
    }
}

template <typename T> int launch(const BlockBiasArgs& a) {
    if (a.num_groups == 0 || a.max_elements == 0) return 0;
    constexpr int kVec = kVec16<T>;
    const int vec = a.vectorized ? kVec : 1;
    const long long blocks = (a.max_elements / vec + kThreads - 1) / kThreads;
    const dim3 grid(static_cast<unsigned>(blocks < 4096 ? blocks : 4096),
                    static_cast<unsigned>(a.num_groups < 65535 ? a.num_groups : 65535));
    auto* stream = static_cast<cudaStream_t>(a.stream);
    T* out = static_cast<T*>(a.out);
    const auto* groups = reinterpret_cast<const long long*>(a.groups);
    const auto* ctx_end = reinterpret_cast<const long long*>(a.ctx_end);
    const auto* own = reinterpret_cast<const long long*>(a.own_begin);
    if (a.vectorized)
        block_bias_kernel<T, kVec><<<grid, kThreads, 0, stream>>>(out, groups, a.num_groups, ctx_end, own,
                                                                         a.block_size);
    else
        block_bias_kernel<T, 1><<<grid, kThreads, 0, stream>>>(out, groups, a.num_groups, ctx_end, own,
                                                                         a.block_size);
    return 0;  // launch_checked() reads the launch's own error
}

} // namespace

int block_bias_vector_width(Dtype dtype) {
    return with_element_type(dtype, [](auto t) { return kVec16<decltype(t)>; });
}

LaunchStatus block_attention_bias(const BlockBiasArgs& a) {
    return launch_checked([&] {
        if (a.num_groups < 0 || a.block_size <= 0) return static_cast<int>(cudaErrorInvalidValue);
        if (a.vectorized && !aligned16(a.out)) return static_cast<int>(cudaErrorInvalidValue);
        return with_element_type(a.dtype, [&](auto t) { return launch<decltype(t)>(a); });
    });
}

} // namespace hsring::kernels
