#pragma once
// The attention of a decode step against a row's key/value cache (src/kernels/cached_attention.cu),
// for a few new tokens per row (1 for plain decoding, a block for a verify step):
//
//   qkv_to_cache      splits the qkv projection's output, applies the per-head RMSNorm of q and k
//                     (Qwen3; none for Llama), rotates both (rope.hpp's half-split rotation) and
//                     writes k and v into the cache at each token's slot: one kernel where ATen
//                     took two norms, two rotations and two index copies.
//   cached_attention  softmax(q k^T * scale) v of every new token over the row's cached keys
//                     0..window-1 that lie at or before its own position (GQA: query head h reads
//                     kv head h / (heads / kv_heads)). Split over the keys ("flash-decoding"):
//                     each block takes one (row, kv head, key range), all the queries of that kv
//                     head, and leaves its running max, sum and unnormalised output in a float
//                     workspace; a second kernel combines the ranges. ATen's memory-efficient
//                     attention ran one block per kv head (8 of an H100's 132 SMs at Qwen3-8B)
//                     and turned the mask into a bias first: ~40 us per layer in the trace.
//
// Roundings as the ATen composition they replace: the norm's output is rounded to T before the
// rotation, the rotation's output and the attention's output once each; scores and softmax in fp32.
// Plain CUDA C++: no torch types cross this header.
#include "kernels/kernel_types.hpp"

#include <cstdint>

namespace hsring::kernels {

struct CacheShape {
    std::int64_t rows = 0;       // cache rows (sequences)
    std::int64_t capacity = 0;   // positions per row
    std::int64_t kv_heads = 0;   // keys/values: [rows, capacity, kv_heads, head_dim] contiguous
    std::int64_t heads = 0;      // query heads, a multiple of kv_heads
    std::int64_t head_dim = 0;   // even, and a multiple of 16 / sizeof(T)
};

struct QkvToCacheArgs {
    CacheShape cache;
    std::int64_t tokens = 0;           // new tokens: rows * n, row-major
    const void* qkv = nullptr;         // [tokens, (heads + 2 kv_heads) * head_dim] contiguous: q | k | v
    const void* q_norm = nullptr;      // [head_dim] or null: no per-head norm of q and k
    const void* k_norm = nullptr;      // [head_dim] (with q_norm)
    float eps = 1e-6f;
    const void* cos = nullptr;         // [tokens, head_dim] contiguous
    const void* sin = nullptr;
    const std::int64_t* slot = nullptr;  // [tokens] on the device: row * capacity + position
    void* keys = nullptr;              // the cache, written at each token's slot
    void* values = nullptr;
    void* q_out = nullptr;             // [tokens, heads, head_dim] contiguous
    Dtype dtype = Dtype::BFloat16;
    void* stream = nullptr;            // cudaStream_t
};

struct CachedAttentionArgs {
    CacheShape cache;
    std::int64_t n = 0;                     // new tokens per row (tokens = rows * n)
    std::int64_t window = 0;                // keys 0..window-1 are read (<= capacity)
    float scale = 1.f;
    const void* q = nullptr;                // [tokens, heads, head_dim] contiguous
    const void* keys = nullptr;
    const void* values = nullptr;
    const std::int64_t* positions = nullptr;  // [tokens] on the device: each token's own position
    float* workspace = nullptr;             // cached_attention_workspace(...) floats
    void* out = nullptr;                    // [tokens, heads, head_dim] contiguous
    Dtype dtype = Dtype::BFloat16;
    void* stream = nullptr;                 // cudaStream_t
};

// Whether the kernels take this shape with elements of `dtype` (else the caller keeps ATen's path).
bool cached_attention_supports(const CacheShape& shape, std::int64_t n, Dtype dtype);

// Floats of workspace cached_attention needs for these arguments (fixed for a fixed shape and
// window, so a CUDA graph captures it once).
std::int64_t cached_attention_workspace(const CachedAttentionArgs& args);

// Enqueue on args.stream (kernel_types.hpp: LaunchStatus says whose an error is).
LaunchStatus qkv_to_cache(const QkvToCacheArgs& args);
LaunchStatus cached_attention(const CachedAttentionArgs& args);

} // namespace hsring::kernels
