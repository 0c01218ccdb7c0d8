#include "kernels/cached_attention.hpp"

#include "kernels/block_reduce.cuh"
#include "kernels/elements.cuh"

#include <cuda_runtime.h>

#include <cmath>

namespace hsring::kernels {
namespace {

constexpr int kTile = 32;            // keys per tile: one per lane when scoring
constexpr int kMaxHeadDim = 256;
constexpr std::int64_t kMaxSharedBytes = 200 * 1024;  // under Hopper's 227 KB per block

// ---- qkv_to_cache: one block per (token, head) of q and k; a k head's block also copies its v.

template <typename T>
__global__ void qkv_to_cache_kernel(const T* __restrict__ qkv, const T* __restrict__ q_norm,
                                    const T* __restrict__ k_norm, float eps, const T* __restrict__ cos,
                                    const T* __restrict__ sin, const long long* __restrict__ slot, T* keys, T* values,
                                    T* __restrict__ q_out, int heads, int kv_heads, int d) {
    const long long token = blockIdx.x / (heads + kv_heads);
    const int head = static_cast<int>(blockIdx.x % (heads + kv_heads));  // >= heads: k head (head - heads)
    const bool is_q = head < heads;
    const int e = threadIdx.x;
    const bool on = e < d;
    const T* src = qkv + token * (static_cast<long long>(heads + 2 * kv_heads) * d) + static_cast<long long>(head) * d;
    float x = on ? to_f(src[e]) : 0.f;
    __shared__ float y[kMaxHeadDim];
    __shared__ float scratch[32];
    const T* norm = is_q ? q_norm : k_norm;
    if (norm) {  // uniform over the block
        const float rstd = rsqrtf(block_sum(x * x, scratch) / static_cast<float>(d) + eps);
        x = on ? round_to<T>(x * rstd * to_f(norm[e])) : 0.f;
    }
    if (on) y[e] = x;
    __syncthreads();
    if (!on) return;
    const int half = d / 2;
    const float c = to_f(cos[token * d + e]), s = to_f(sin[token * d + e]);
    const T r = from_f<T>(e < half ? x * c - y[e + half] * s : x * c + y[e - half] * s);
    if (is_q) {
        q_out[(token * heads + head) * d + e] = r;
    } else {
        const long long at = (slot[token] * kv_heads + (head - heads)) * d + e;
        keys[at] = r;
        values[at] = src[static_cast<long long>(kv_heads) * d + e];  // v head g lies kv_heads heads after k head g
    }
}

// ---- cached_attention: block (split, kv head, row) runs the online softmax of the row's rep * n
// queries of that kv head over its tiles of keys; state per query [max, sum, acc[d]] in shared
// memory, written to the workspace at the end; combine_kernel merges the splits.

struct Split {
    int splits = 1, tiles_per_split = 1;
};

int multiprocessors() {
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms < 1)
        return 1;
    return sms;
}

// About two blocks per SM over all (row, kv head) pairs; every split gets whole tiles.
Split split_of(const CachedAttentionArgs& a) {
    const long long tiles = (a.window + kTile - 1) / kTile;
    const long long pairs = a.cache.rows * a.cache.kv_heads;
    const long long want = (2LL * multiprocessors() + pairs - 1) / pairs;
    Split s;
    s.tiles_per_split = static_cast<int>((tiles + want - 1) / want);
    if (s.tiles_per_split < 1) s.tiles_per_split = 1;
    s.splits = static_cast<int>((tiles + s.tiles_per_split - 1) / s.tiles_per_split);
    return s;
}

int warps_for(long long queries) { return queries >= 8 ? 8 : 4; }

template <typename T> long long shared_bytes(long long d, long long queries, int warps) {
    const long long kstride = d + kVec16<T>;
    return kTile * (kstride + d) * static_cast<long long>(sizeof(T)) + queries * (d + 2) * 4 + warps * (d + 32) * 4;
}

template <typename T, int VEC>
__global__ void cached_attention_kernel(const T* __restrict__ q, const T* __restrict__ keys, const T* __restrict__ values,
                                        const long long* __restrict__ positions, float* __restrict__ workspace, int cap,
                                        int kv_heads, int heads, int d, int n, int window, int tiles_per_split,
                                        int splits, float scale) {
    using P = Pack<T, VEC>;
    const int split = blockIdx.x, g = blockIdx.y;
    const long long r = blockIdx.z;
    const int rep = heads / kv_heads, queries = rep * n, kstride = d + VEC, sd = d + 2;
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    extern __shared__ __align__(16) unsigned char shared[];
    T* kt = reinterpret_cast<T*>(shared);
    T* vt = kt + kTile * kstride;
    float* state = reinterpret_cast<float*>(vt + kTile * d);  // 16-byte aligned: kTile * sizeof(T) * ... bytes
    float* qf = state + queries * sd + warp * d;
    float* pw = state + queries * sd + warps * d + warp * 32;
    for (int i = threadIdx.x; i < queries * sd; i += blockDim.x) state[i] = i % sd == 0 ? -INFINITY : 0.f;
    const int first = split * tiles_per_split * kTile;
    const int end = min(window, first + tiles_per_split * kTile);
    const int per_row = d / VEC;
    __syncthreads();
    for (int k0 = first; k0 < end; k0 += kTile) {
        for (int i = threadIdx.x; i < kTile * per_row; i += blockDim.x) {
            const int j = i / per_row, c = (i % per_row) * VEC;
            P kp, vp;
            if (k0 + j < window) {
                const long long at = ((r * cap + k0 + j) * kv_heads + g) * d + c;
                kp = *reinterpret_cast<const P*>(keys + at);
                vp = *reinterpret_cast<const P*>(values + at);
            } else {
#pragma unroll
                for (int k = 0; k < VEC; ++k) kp.v[k] = vp.v[k] = from_f<T>(0.f);
            }
            *reinterpret_cast<P*>(kt + j * kstride + c) = kp;
            *reinterpret_cast<P*>(vt + j * d + c) = vp;
        }
        __syncthreads();
        for (int qi = warp; qi < queries; qi += warps) {
            const long long token = r * n + qi / rep;
            const int h = g * rep + qi % rep;
            const long long pos = positions[token];
            if (k0 > pos) continue;  // the whole tile lies after this query (uniform over the warp)
            const T* qp = q + (token * heads + h) * d;
            for (int c = lane; c < d; c += 32) qf[c] = to_f(qp[c]) * scale;
            __syncwarp();
            float s = 0.f;
            const T* kr = kt + lane * kstride;
            for (int c = 0; c < d; c += VEC) {
                const P kp = *reinterpret_cast<const P*>(kr + c);
#pragma unroll
                for (int k = 0; k < VEC; ++k) s += qf[c + k] * to_f(kp.v[k]);
            }
            const int key = k0 + lane;
            const bool valid = key < window && key <= pos;
            s = valid ? s : -INFINITY;
            float* st = state + qi * sd;
            const float m_old = st[0];
            const float m_new = fmaxf(m_old, warp_max(s));  // finite: key k0 <= pos is valid
            const float p = valid ? expf(s - m_new) : 0.f;
            const float alpha = expf(m_old - m_new);      // 0 while m_old is -inf
            const float sum = warp_sum(p);
            pw[lane] = p;
            __syncwarp();
            for (int c = lane; c < d; c += 32) {
                float acc = st[2 + c] * alpha;
                for (int j = 0; j < kTile; ++j) acc += pw[j] * to_f(vt[j * d + c]);
                st[2 + c] = acc;
            }
            __syncwarp();
            if (lane == 0) {
                st[0] = m_new;
                st[1] = st[1] * alpha + sum;
            }
            __syncwarp();  // qf and pw are the next query's
        }
        __syncthreads();  // the tile is overwritten next
    }
    for (int i = threadIdx.x; i < queries * sd; i += blockDim.x) {
        const int qi = i / sd;
        const long long token = r * n + qi / rep;
        const int h = g * rep + qi % rep;
        workspace[((token * heads + h) * splits + split) * sd + i % sd] = state[i];
    }
}

// One block per (token, query head): the splits' partial softmaxes merged, normalised, rounded.
template <typename T>
__global__ void combine_kernel(const float* __restrict__ workspace, T* __restrict__ out, int splits, int d) {
    const long long qh = blockIdx.x;
    const int sd = d + 2;
    const float* w = workspace + qh * splits * sd;
    float m = -INFINITY;
    for (int s = 0; s < splits; ++s) m = fmaxf(m, w[s * sd]);
    float l = 0.f;
    for (int s = 0; s < splits; ++s)
        if (w[s * sd] > -INFINITY) l += w[s * sd + 1] * expf(w[s * sd] - m);
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float o = 0.f;
        for (int s = 0; s < splits; ++s)
            if (w[s * sd] > -INFINITY) o += w[s * sd + 2 + c] * expf(w[s * sd] - m);
        out[qh * d + c] = from_f<T>(o / l);
    }
}

bool shape_ok(const CacheShape& s) {
    return s.rows >= 0 && s.capacity > 0 && s.kv_heads > 0 && s.heads > 0 && s.heads % s.kv_heads == 0 &&
           s.head_dim > 0 && s.head_dim % 2 == 0 && s.head_dim <= kMaxHeadDim && s.rows <= 65535 &&
           s.kv_heads <= 65535 && s.capacity < (1LL << 31);
}

template <typename T> bool supports(const CacheShape& s, std::int64_t n) {
    return shape_ok(s) && s.head_dim % kVec16<T> == 0 && n >= 1 &&
           shared_bytes<T>(s.head_dim, s.heads / s.kv_heads * n, 8) <= kMaxSharedBytes;
}

int dispatch_supports(const CacheShape& s, std::int64_t n, Dtype dtype) {
    return with_element_type(dtype, [&](auto t) { return supports<decltype(t)>(s, n) ? 1 : 0; });
}

template <typename T> int launch_qkv(const QkvToCacheArgs& a) {
    if (a.tokens == 0) return 0;
    const int d = static_cast<int>(a.cache.head_dim);
    const long long blocks = a.tokens * (a.cache.heads + a.cache.kv_heads);
    if (blocks > (1LL << 31) - 1) return static_cast<int>(cudaErrorInvalidValue);
    qkv_to_cache_kernel<T><<<static_cast<unsigned>(blocks), (d + 31) / 32 * 32, 0, static_cast<cudaStream_t>(a.stream)>>>(
        static_cast<const T*>(a.qkv), static_cast<const T*>(a.q_norm), static_cast<const T*>(a.k_norm), a.eps,
        static_cast<const T*>(a.cos), static_cast<const T*>(a.sin), reinterpret_cast<const long long*>(a.slot),
        static_cast<T*>(a.keys), static_cast<T*>(a.values), static_cast<T*>(a.q_out), static_cast<int>(a.cache.heads),
        static_cast<int>(a.cache.kv_heads), d);
    return 0;
}

template <typename T> int launch_attention(const CachedAttentionArgs& a) {
    const CacheShape& c = a.cache;
    if (c.rows == 0) return 0;
    if (!supports<T>(c, a.n)) return static_cast<int>(cudaErrorInvalidValue);
    constexpr int kVec = kVec16<T>;
    const Split sp = split_of(a);
    const long long queries = c.heads / c.kv_heads * a.n;
    const int warps = warps_for(queries);
    const long long bytes = shared_bytes<T>(c.head_dim, queries, warps);
    auto kernel = cached_attention_kernel<T, kVec>;
    if (bytes > 48 * 1024) {
        if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
            e != cudaSuccess)
            return static_cast<int>(e);
    }
    auto* stream = static_cast<cudaStream_t>(a.stream);
    const dim3 grid(static_cast<unsigned>(sp.splits), static_cast<unsigned>(c.kv_heads), static_cast<unsigned>(c.rows));
    kernel<<<grid, warps * 32, bytes, stream>>>(
        static_cast<const T*>(a.q), static_cast<const T*>(a.keys), static_cast<const T*>(a.values),
        reinterpret_cast<const long long*>(a.positions), a.workspace, static_cast<int>(c.capacity),
        static_cast<int>(c.kv_heads), static_cast<int>(c.heads), static_cast<int>(c.head_dim), static_cast<int>(a.n),
        static_cast<int>(a.window), sp.tiles_per_split, sp.splits, a.scale);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return static_cast<int>(e);
    const long long qh = c.rows * a.n * c.heads;
    const int threads = c.head_dim >= 128 ? 128 : static_cast<int>((c.head_dim + 31) / 32 * 32);
    combine_kernel<T><<<static_cast<unsigned>(qh), threads, 0, stream>>>(a.workspace, static_cast<T*>(a.out), sp.splits,
                                                                         static_cast<int>(c.head_dim));
    return 0;
}

} // namespace

bool cached_attention_supports(const CacheShape& shape, std::int64_t n, Dtype dtype) {
    return dispatch_supports(shape, n, dtype) == 1;
}

std::int64_t cached_attention_workspace(const CachedAttentionArgs& a) {
    if (a.window < 1 || a.cache.rows < 1 || a.cache.kv_heads < 1) return 0;
    return a.cache.rows * a.n * a.cache.heads * split_of(a).splits * (a.cache.head_dim + 2);
}

LaunchStatus qkv_to_cache(const QkvToCacheArgs& a) {
    return launch_checked([&] {
        if (!shape_ok(a.cache) || a.tokens < 0 || !a.qkv || !a.cos || !a.sin || !a.slot || !a.keys || !a.values ||
            !a.q_out || (a.q_norm == nullptr) != (a.k_norm == nullptr))
            return static_cast<int>(cudaErrorInvalidValue);
        return with_element_type(a.dtype, [&](auto t) { return launch_qkv<decltype(t)>(a); });
    });
}

LaunchStatus cached_attention(const CachedAttentionArgs& a) {
    return launch_checked([&] {
        if (!shape_ok(a.cache) || a.n < 1 || a.window < 1 || a.window > a.cache.capacity || !a.q || !a.keys ||
            !a.values || !a.positions || !a.workspace || !a.out || a.cache.rows * a.n * a.cache.heads > (1LL << 31) - 1)
            return static_cast<int>(cudaErrorInvalidValue);
        return with_element_type(a.dtype, [&](auto t) { return launch_attention<decltype(t)>(a); });
    });
}

} // namespace hsring::kernels
