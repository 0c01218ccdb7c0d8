#pragma once
// The decode engine's fixed-shape step (TargetModel::forward_static) as few kernels: on the GPU
// with src/kernels, a residual add fused with the next RMSNorm, q/k norm + rotation + the cache
// write in one kernel, and a split-over-keys attention against the cache (cached_attention.hpp);
// elsewhere (CPU, fp8 caches, shapes the kernels do not take) the ATen composition the step used
// before, which stays the reference the GPU test compares against.
#include "model/ops/ops.hpp"

#include <ATen/core/Tensor.h>

namespace hsring::model {

// x @ w^T (dense()); on the GPU, 1-16 rows of x (a plain step, a verify step): a GEMV that streams
// w once (gemv_rows.hpp; more than one row: bf16 / fp16 only). In bf16 / fp16 a row's result does
// not depend on how many rows came with it.
at::Tensor dense_rows(const at::Tensor& x, const at::Tensor& w);

// Whether dense_rows(x, w) runs the GEMV kernel (false: dense()). The decode test asserts it for
// the preset's projections: a fallback gives the same numbers, only slower.
bool dense_rows_on_kernel(const at::Tensor& x, const at::Tensor& w);

struct SumAndNorm {
    at::Tensor sum;     // x + residual (x itself without a residual)
    at::Tensor normed;  // rms_norm(sum, w, eps)
};

// x, residual: [T, H] (residual may be undefined); w: [H].
SumAndNorm add_rms_norm(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& w, double eps);

struct CachedHeads {
    std::int64_t heads = 0, kv_heads = 0, head_dim = 0;
};

// qkv: [T, (heads + 2 kv_heads) * head_dim], q | k | v. Applies the per-head norms (q_norm and
// k_norm both defined, or neither), rotates q and k by `rope`, writes k and v into the caches
// [rows, capacity, kv_heads, head_dim] at rows * capacity + position = slot[t]. Returns the
// rotated q [T, heads, head_dim].
at::Tensor qkv_to_cache(const at::Tensor& qkv, const CachedHeads& h, const at::Tensor& q_norm, const at::Tensor& k_norm,
                        double eps, const RopeTables& rope, const at::Tensor& slot, const at::Tensor& keys,
                        const at::Tensor& values);

// Attention of q [rows * n, heads, head_dim] (row-major: row r's n new tokens) over each row's
// cached keys 0..window-1 at or before the token's position (positions [rows * n], int64).
// Returns [rows * n, heads, head_dim].
at::Tensor cached_attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                            const at::Tensor& positions, std::int64_t n, std::int64_t window, double scale);

} // namespace hsring::model
