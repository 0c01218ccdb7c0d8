#include "kernels/gemv_rows.hpp"

#include "kernels/block_reduce.cuh"
#include "kernels/elements.cuh"

#include <cuda_runtime.h>

#include <atomic>
#include <type_traits>

namespace hsring::kernels {
namespace {

// ---- Simt: one row ----------------------------------------------------------------------------
constexpr int kWarps = 8;        // per block
constexpr int kRowsPerWarp = 2;  // weight rows a warp streams side by side (loads in flight)
constexpr int kMaxSharedBytes = 48 * 1024;  // x is staged in shared memory (no opt-in needed)

// Weights are read once per step: a streaming load that does not keep them in L1.
template <typename P> __device__ __forceinline__ P load_stream(const P* p) {
    P v;
    *reinterpret_cast<int4*>(&v) = __ldcs(reinterpret_cast<const int4*>(p));
    return v;
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                          T* __restrict__ y, int in, long long out) {
    constexpr int VEC = kVec16<T>;
    using P = Pack<T, VEC>;
    extern __shared__ __align__(16) unsigned char shared[];
    T* xs = reinterpret_cast<T*>(shared);
    const int packs = in / VEC;
    for (int i = threadIdx.x; i < packs; i += blockDim.x)
        reinterpret_cast<P*>(xs)[i] = reinterpret_cast<const P*>(x)[i];
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long long first = (static_cast<long long>(blockIdx.x) * kWarps + warp) * kRowsPerWarp;
    float acc[kRowsPerWarp] = {};
    const P* rows[kRowsPerWarp];
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {
        const long long row = first + k < out ? first + k : out - 1;  // a clamped row is computed, not stored
        rows[k] = reinterpret_cast<const P*>(w + row * in);
    }
#pragma unroll 2
    for (int i = lane; i < packs; i += 32) {
        const P xv = reinterpret_cast<const P*>(xs)[i];
        P wv[kRowsPerWarp];
#pragma unroll
        for (int k = 0; k < kRowsPerWarp; ++k) wv[k] = load_stream(rows[k] + i);
#pragma unroll
        for (int k = 0; k < kRowsPerWarp; ++k)
#pragma unroll
            for (int e = 0; e < VEC; ++e) acc[k] += to_f(xv.v[e]) * to_f(wv[k].v[e]);
    }
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {
        const float s = warp_sum(acc[k]);
        if (lane == 0 && first + k < out) y[first + k] = from_f<T>(s);
    }
}

template <typename T> bool simt_supports(const GemvArgs& a) {
    return a.rows == 1 && a.in > 0 && a.in * static_cast<long long>(sizeof(T)) <= kMaxSharedBytes && a.in % kVec16<T> == 0 &&
           a.out > 0 && a.out < (1LL << 40) && a.x && a.weight && aligned16(a.x) && aligned16(a.weight);
}

template <typename T> int simt_launch(const GemvArgs& a) {
    const long long per_block = static_cast<long long>(kWarps) * kRowsPerWarp;
    const long long blocks = (a.out + per_block - 1) / per_block;
    if (blocks > (1LL << 31) - 1) return static_cast<int>(cudaErrorInvalidValue);
    const int bytes = static_cast<int>(a.in * sizeof(T));
    gemv_kernel<T><<<static_cast<unsigned>(blocks), kWarps * 32, bytes, static_cast<cudaStream_t>(a.stream)>>>(
        static_cast<const T*>(a.x), static_cast<const T*>(a.weight), static_cast<T*>(a.y), static_cast<int>(a.in), a.out);
    return 0;  // launch_checked() reads the launch's own error
}

// ---- TensorCores: up to 16 rows in one m16n8k16 tile --------------------------------------------
// A block owns kTileCols weight rows (kColTiles n8 tiles) and splits `in` across its kWarps warps
// in 32-element chunks (chunk c goes to warp c % kWarps, so the block reads 512 contiguous bytes of
// each weight row per round). Each lane loads 16 bytes (8 consecutive k) of one weight row and of
// x's rows g and g + 8 (g = lane / 4); the mma's k slots are a permutation of those 32 k, the same
// for x and the weight, so the products are the same. The warps' partial sums are added in warp
// order through shared memory. Nothing in row r's arithmetic depends on the other rows.
constexpr int kMmaWarps = 8;
constexpr int kColTiles = 2;
constexpr int kTileCols = 8 * kColTiles;
constexpr int kChunk = 32;   // k elements per warp per round
constexpr int kUnroll = 4;   // rounds whose loads are issued together

template <typename T> __device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                                uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();  // gemv_rows_supports refuses devices older than sm_80
#endif
}

template <typename T>
__global__ void __launch_bounds__(kMmaWarps * 32) gemv_mma_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                                  T* __restrict__ y, int rows, int in, long long out) {
    __shared__ float partial[kMmaWarps][16][kTileCols];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const long long col0 = static_cast<long long>(blockIdx.x) * kTileCols;
    const uint4* wrow[kColTiles];
#pragma unroll
    for (int j = 0; j < kColTiles; ++j) {
        const long long n = col0 + j * 8 + g;
        wrow[j] = reinterpret_cast<const uint4*>(w + (n < out ? n : out - 1) * static_cast<long long>(in)) + t;
    }
    // Rows past `rows` read as zeros (their sums are not stored).
    const uint4* xlo = g < rows ? reinterpret_cast<const uint4*>(x + static_cast<long long>(g) * in) + t : nullptr;
    const uint4* xhi = g + 8 < rows ? reinterpret_cast<const uint4*>(x + static_cast<long long>(g + 8) * in) + t : nullptr;
    float acc[kColTiles][4] = {};
    const int chunks = in / kChunk;
    for (int c0 = warp; c0 < chunks; c0 += kMmaWarps * kUnroll) {
        uint4 wv[kUnroll][kColTiles], xa[kUnroll], xb[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int c = c0 + u * kMmaWarps;
            const bool live = c < chunks;
#pragma unroll
            for (int j = 0; j < kColTiles; ++j) wv[u][j] = live ? __ldcs(wrow[j] + c * 4) : make_uint4(0, 0, 0, 0);
            xa[u] = live && xlo ? __ldg(xlo + c * 4) : make_uint4(0, 0, 0, 0);
            xb[u] = live && xhi ? __ldg(xhi + c * 4) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            if (c0 + u * kMmaWarps >= chunks) break;
            const uint32_t a0[4] = {xa[u].x, xb[u].x, xa[u].y, xb[u].y};  // k 8t+0..3
            const uint32_t a1[4] = {xa[u].z, xb[u].z, xa[u].w, xb[u].w};  // k 8t+4..7
#pragma unroll
            for (int j = 0; j < kColTiles; ++j) {
                mma_16816<T>(acc[j], a0, wv[u][j].x, wv[u][j].y);
                mma_16816<T>(acc[j], a1, wv[u][j].z, wv[u][j].w);
            }
        }
    }
    // acc[j]: {row g, col 2t}, {g, 2t + 1}, {g + 8, 2t}, {g + 8, 2t + 1} of tile j.
#pragma unroll
    for (int j = 0; j < kColTiles; ++j) {
        partial[warp][g][j * 8 + 2 * t] = acc[j][0];
        partial[warp][g][j * 8 + 2 * t + 1] = acc[j][1];
        partial[warp][g + 8][j * 8 + 2 * t] = acc[j][2];
        partial[warp][g + 8][j * 8 + 2 * t + 1] = acc[j][3];
    }
    __syncthreads();
    static_assert(16 * kTileCols == kMmaWarps * 32, "one output per thread");
    const int r = threadIdx.x / kTileCols, col = threadIdx.x % kTileCols;
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < kMmaWarps; ++k) s += partial[k][r][col];
    if (r < rows && col0 + col < out) y[static_cast<long long>(r) * out + col0 + col] = from_f<T>(s);
}

// Compute capability 8.0 or newer (mma.sync on bf16), of the current device; asked once per device.
bool current_device_has_mma() {
    static std::atomic<int> known[64];  // 0 unknown, 1 no, 2 yes
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
    int k = known[dev].load(std::memory_order_relaxed);
    if (k == 0) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
        k = major >= 8 ? 2 : 1;
        known[dev].store(k, std::memory_order_relaxed);
    }
    return k == 2;
}

template <typename T> bool mma_supports(const GemvArgs& a) {
    if constexpr (std::is_same_v<T, float>) {
        return false;
    } else {
        return a.rows >= 1 && a.rows <= kGemvMaxRows && a.in > 0 && a.in % kChunk == 0 && a.in < (1LL << 31) &&
               a.out > 0 && (a.out + kTileCols - 1) / kTileCols < (1LL << 31) && a.x && a.weight && aligned16(a.x) &&
               aligned16(a.weight) && current_device_has_mma();
    }
}

template <typename T> int mma_launch(const GemvArgs& a) {
    if constexpr (std::is_same_v<T, float>) {
        return static_cast<int>(cudaErrorInvalidValue);  // mma_supports refuses it
    } else {
        const long long blocks = (a.out + kTileCols - 1) / kTileCols;
        gemv_mma_kernel<T><<<static_cast<unsigned>(blocks), kMmaWarps * 32, 0, static_cast<cudaStream_t>(a.stream)>>>(
            static_cast<const T*>(a.x), static_cast<const T*>(a.weight), static_cast<T*>(a.y), static_cast<int>(a.rows),
            static_cast<int>(a.in), a.out);
        return 0;
    }
}

template <typename T> bool supports(const GemvArgs& a, GemvKernel k) {
    return k == GemvKernel::Simt ? simt_supports<T>(a) : mma_supports<T>(a);
}

} // namespace

GemvKernel gemv_kernel_for(const GemvArgs& a) {
    if (a.kernel != GemvKernel::Auto) return a.kernel;
    if (a.dtype == Dtype::Float32) return GemvKernel::Simt;
    // One row the mma kernel does not take (in not a multiple of 32, a pre-sm_80 device): Simt.
    // Its rows then differ from a verify step's only where the verify step is not on a kernel either.
    const bool mma = with_element_type(a.dtype, [&](auto t) { return mma_supports<decltype(t)>(a) ? 1 : 0; }) == 1;
    return mma || a.rows != 1 ? GemvKernel::TensorCores : GemvKernel::Simt;
}

bool gemv_rows_supports(const GemvArgs& a) {
    const GemvKernel k = gemv_kernel_for(a);
    return with_element_type(a.dtype, [&](auto t) { return supports<decltype(t)>(a, k) ? 1 : 0; }) == 1;
}

LaunchStatus gemv_rows(const GemvArgs& a) {
    const GemvKernel k = gemv_kernel_for(a);
    return launch_checked([&] {
        return with_element_type(a.dtype, [&](auto t) {
            using T = decltype(t);
            if (!supports<T>(a, k) || !a.y) return static_cast<int>(cudaErrorInvalidValue);
            return k == GemvKernel::Simt ? simt_launch<T>(a) : mma_launch<T>(a);
        });
    });
}

} // namespace hsring::kernels
