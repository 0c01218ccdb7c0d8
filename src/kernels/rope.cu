#include "kernels/rope.hpp"

#include "kernels/elements.cuh"

#include <cuda_runtime.h>

namespace hsring::kernels {
namespace {

// One thread: VEC pairs (i, i + half) of one (row, head). Memory-bound: every x element is read
// once, every output written once; cos/sin rows are shared by all heads of a row (cached).
template <typename T, int VEC>
__global__ void rope_kernel(const T* __restrict__ x, T* __restrict__ out, const T* __restrict__ cos,
                            const T* __restrict__ sin, long long rows, int heads, int half, long long x_row,
                            long long x_head, long long t_row, bool transpose) {
    using P = Pack<T, VEC>;
    const int chunks = half / VEC;
    const long long total = rows * heads * chunks;
    for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int chunk = static_cast<int>(idx % chunks);
        const long long rh = idx / chunks;
        const int head = static_cast<int>(rh % heads);
        const long long row = rh / heads;
        const int i = chunk * VEC;
        const T* xp = x + row * x_row + head * x_head;
        T* op = out + (row * heads + head) * (2LL * half);
        const T* cp = cos + row * t_row;
        const T* sp = sin + row * t_row;
        const P a = *reinterpret_cast<const P*>(xp + i), b = *reinterpret_cast<const P*>(xp + half + i);
        const P c0 = *reinterpret_cast<const P*>(cp + i), c1 = *reinterpret_cast<const P*>(cp + half + i);
        const P s0 = *reinterpret_cast<const P*>(sp + i), s1 = *reinterpret_cast<const P*>(sp + half + i);
        P o0, o1;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const float av = to_f(a.v[k]), bv = to_f(b.v[k]);
            if (!transpose) {
                o0.v[k] = from_f<T>(av * to_f(c0.v[k]) - bv * to_f(s0.v[k]));
                o1.v[k] = from_f<T>(bv * to_f(c1.v[k]) + av * to_f(s1.v[k]));
            } else {
                o0.v[k] = from_f<T>(av * to_f(c0.v[k]) + bv * to_f(s1.v[k]));
                o1.v[k] = from_f<T>(bv * to_f(c1.v[k]) - av * to_f(s0.v[k]));
            }
        }
        *reinterpret_cast<P*>(op + i) = o0;
        *reinterpret_cast<P*>(op + half + i) = o1;
    }
}

template <typename T> int launch(const RopeArgs& a) {
    const int half = static_cast<int>(a.head_dim / 2);
    constexpr int kVec = kVec16<T>;
    // 16-byte accesses when every row, head and half starts on a 16-byte boundary.
    const bool vec = half % kVec == 0 && a.x_row_stride % kVec == 0 && a.x_head_stride % kVec == 0 &&
                     a.table_row_stride % kVec == 0 && aligned16(a.x) && aligned16(a.out) && aligned16(a.cos) &&
                     aligned16(a.sin);
    const long long total = a.rows * a.heads * (vec ? half / kVec : half);
    if (total == 0) return 0;
    const int threads = 256;
    const long long blocks = (total + threads - 1) / threads;
    const unsigned grid = static_cast<unsigned>(blocks < (1LL << 30) ? blocks : (1LL << 30));
    auto* stream = static_cast<cudaStream_t>(a.stream);
    const T* x = static_cast<const T*>(a.x);
    T* out = static_cast<T*>(a.out);
    const T* c = static_cast<const T*>(a.cos);
    const T* s = static_cast<const T*>(a.sin);
    if (vec)
        rope_kernel<T, kVec><<<grid, threads, 0, stream>>>(x, out, c, s, a.rows, static_cast<int>(a.heads), half,
                                                           a.x_row_stride, a.x_head_stride, a.table_row_stride,
                                                           a.transpose);
    else
        rope_kernel<T, 1><<<grid, threads, 0, stream>>>(x, out, c, s, a.rows, static_cast<int>(a.heads), half,
                                                        a.x_row_stride, a.x_head_stride, a.table_row_stride,
                                                        a.transpose);
    return 0;  // launch_checked() reads the launch's own error
}

} // namespace

LaunchStatus rope(const RopeArgs& a) {
    return launch_checked([&] {
        if (a.head_dim % 2 != 0 || a.rows < 0 || a.heads < 0) return static_cast<int>(cudaErrorInvalidValue);
        return with_element_type(a.dtype, [&](auto t) { return launch<decltype(t)>(a); });
    });
}

} // namespace hsring::kernels
