#include "kernels/swiglu.hpp"

#include "kernels/elements.cuh"

#include <cuda_runtime.h>

namespace hsring::kernels {
namespace {

constexpr int kThreads = 256;

template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
    swiglu_forward_kernel(const T* __restrict__ g, const T* __restrict__ u, T* __restrict__ y, long long packs) {
    using P = Pack<T, VEC>;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < packs;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const P gv = reinterpret_cast<const P*>(g)[i], uv = reinterpret_cast<const P*>(u)[i];
        P out;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const float x = to_f(gv.v[k]);
            const float s = silu_rounded<T>(x);
            out.v[k] = from_f<T>(__fmul_rn(s, to_f(uv.v[k])));
        }
        reinterpret_cast<P*>(y)[i] = out;
    }
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
    swiglu_backward_kernel(const T* __restrict__ g, const T* __restrict__ u, const T* __restrict__ dy,
                           T* __restrict__ dg, T* __restrict__ du, long long packs) {
    using P = Pack<T, VEC>;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < packs;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const P gv = reinterpret_cast<const P*>(g)[i], uv = reinterpret_cast<const P*>(u)[i],
                dyv = reinterpret_cast<const P*>(dy)[i];
        P dgv, duv;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const float x = to_f(gv.v[k]), d = to_f(dyv.v[k]);
            const float s = silu_rounded<T>(x);
            duv.v[k] = from_f<T>(__fmul_rn(d, s));
            const float ds = round_to<T>(__fmul_rn(d, to_f(uv.v[k])));
            // As ATen's silu_backward is written (nvcc contracts it alike: an fma in the bracket).
            const float sig = 1.f / (1.f + expf(-x));
            dgv.v[k] = from_f<T>(ds * sig * (1.f + x * (1.f - sig)));
        }
        reinterpret_cast<P*>(dg)[i] = dgv;
        reinterpret_cast<P*>(du)[i] = duv;
    }
}

unsigned grid_for(long long packs) {
    const long long blocks = (packs + kThreads - 1) / kThreads;
    return static_cast<unsigned>(blocks < (1LL << 20) ? blocks : (1LL << 20));
}

template <typename T> int launch_forward(const SwiGluArgs& a) {
    constexpr int kVec = kVec16<T>;
    const bool vec = a.n % kVec == 0 && aligned16(a.gate) && aligned16(a.up) && aligned16(a.out);
    auto* stream = static_cast<cudaStream_t>(a.stream);
    const auto* g = static_cast<const T*>(a.gate);
    const auto* u = static_cast<const T*>(a.up);
    auto* y = static_cast<T*>(a.out);
    if (vec)
        swiglu_forward_kernel<T, kVec><<<grid_for(a.n / kVec), kThreads, 0, stream>>>(g, u, y, a.n / kVec);
    else
        swiglu_forward_kernel<T, 1><<<grid_for(a.n), kThreads, 0, stream>>>(g, u, y, a.n);
    return 0;
}

template <typename T> int launch_backward(const SwiGluArgs& a) {
    constexpr int kVec = kVec16<T>;
    const bool vec = a.n % kVec == 0 && aligned16(a.gate) && aligned16(a.up) && aligned16(a.grad_out) &&
                     aligned16(a.grad_gate) && aligned16(a.grad_up);
    auto* stream = static_cast<cudaStream_t>(a.stream);
    const auto* g = static_cast<const T*>(a.gate);
    const auto* u = static_cast<const T*>(a.up);
    const auto* dy = static_cast<const T*>(a.grad_out);
    auto* dg = static_cast<T*>(a.grad_gate);
    auto* du = static_cast<T*>(a.grad_up);
    if (vec)
        swiglu_backward_kernel<T, kVec><<<grid_for(a.n / kVec), kThreads, 0, stream>>>(g, u, dy, dg, du, a.n / kVec);
    else
        swiglu_backward_kernel<T, 1><<<grid_for(a.n), kThreads, 0, stream>>>(g, u, dy, dg, du, a.n);
    return 0;
}

} // namespace

LaunchStatus swiglu_forward(const SwiGluArgs& a) {
    return launch_checked([&] {
        if (a.n < 0 || (a.n > 0 && (!a.gate || !a.up || !a.out))) return static_cast<int>(cudaErrorInvalidValue);
        if (a.n == 0) return 0;
        return with_element_type(a.dtype, [&](auto t) { return launch_forward<decltype(t)>(a); });
    });
}

LaunchStatus swiglu_backward(const SwiGluArgs& a) {
    return launch_checked([&] {
        if (a.n < 0 || (a.n > 0 && (!a.gate || !a.up || !a.grad_out || !a.grad_gate || !a.grad_up)))
            return static_cast<int>(cudaErrorInvalidValue);
        if (a.n == 0) return 0;
        return with_element_type(a.dtype, [&](auto t) { return launch_backward<decltype(t)>(a); });
    });
}

} // namespace hsring::kernels
