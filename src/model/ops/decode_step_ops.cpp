#include "model/ops/decode_step_ops.hpp"

#include "hsring/error.hpp"
#include "model/io/safetensors.hpp"
#include "model/ops/attention.hpp"
#include "model/ops/kernel_call.hpp"

#include <ATen/ATen.h>

#include <optional>
#if HSRING_KERNELS_ON
#include "kernels/cached_attention.hpp"
#include "kernels/gemv_rows.hpp"
#include "kernels/rms_norm_rows.hpp"

#include <c10/cuda/CUDAGuard.h>
#endif

namespace hsring::model {
namespace {

#if HSRING_KERNELS_ON
bool kernel_tensor(const at::Tensor& t, at::ScalarType dtype, const at::Device& device) {
    return t.defined() && t.is_cuda() && t.device() == device && t.scalar_type() == dtype && t.is_contiguous();
}

kernels::CacheShape cache_shape(const at::Tensor& keys, std::int64_t heads) {
    kernels::CacheShape s;
    s.rows = keys.size(0);
    s.capacity = keys.size(1);
    s.kv_heads = keys.size(2);
    s.head_dim = keys.size(3);
    s.heads = heads;
    return s;
}

bool cache_ok(const at::Tensor& keys, const at::Tensor& values, at::ScalarType dtype, const at::Device& device) {
    return kernel_tensor(keys, dtype, device) && kernel_tensor(values, dtype, device) && keys.dim() == 4 &&
           keys.sizes() == values.sizes();
}
#endif

} // namespace

#if HSRING_KERNELS_ON
namespace {
// The GEMV's arguments for x @ w^T, or nothing when the kernel does not take them (y unset).
std::optional<kernels::GemvArgs> gemv_args(const at::Tensor& x, const at::Tensor& w) {
    const auto t = x.scalar_type();
    if (!(kernel_call::supported(t) && x.dim() == 2 && x.size(0) >= 1 && x.size(0) <= kernels::kGemvMaxRows &&
          kernel_tensor(x, t, x.device()) &&
          kernel_tensor(w, t, x.device()) && w.dim() == 2 && w.size(1) == x.size(1)))
        return std::nullopt;
    kernels::GemvArgs a;
    a.x = x.data_ptr();
    a.weight = w.data_ptr();
    a.rows = x.size(0);
    a.in = w.size(1);
    a.out = w.size(0);
    a.dtype = kernel_call::dtype(t);
    if (!kernels::gemv_rows_supports(a)) return std::nullopt;
    return a;
}
} // namespace
#endif

bool dense_rows_on_kernel(const at::Tensor& x, const at::Tensor& w) {
#if HSRING_KERNELS_ON
    return gemv_args(x, w).has_value();
#else
    (void)x;
    (void)w;
    return false;
#endif
}

at::Tensor dense_rows(const at::Tensor& x, const at::Tensor& w) {
#if HSRING_KERNELS_ON
    if (auto a = gemv_args(x, w)) {
        const c10::cuda::CUDAGuard guard(x.device());
        at::Tensor y = at::empty({a->rows, a->out}, x.options());
        a->y = y.data_ptr();
        a->stream = kernel_call::stream(x);
        kernel_call::check(kernels::gemv_rows(*a), "gemv kernel on {} [{} rows, {} x {}]", x.device().str(), a->rows,
                           a->out, a->in);
        return y;
    }
#endif
    return dense(x, w);
}

SumAndNorm add_rms_norm(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& w, double eps) {
#if HSRING_KERNELS_ON
    const auto t = x.scalar_type();
    if (kernel_call::supported(t) && x.dim() == 2 && kernel_tensor(x, t, x.device()) &&
        kernel_tensor(w, t, x.device()) && w.dim() == 1 && w.size(0) == x.size(1) &&
        (!residual.defined() || (kernel_tensor(residual, t, x.device()) && residual.sizes() == x.sizes()))) {
        const c10::cuda::CUDAGuard guard(x.device());
        SumAndNorm r;
        r.sum = residual.defined() ? at::empty_like(x) : x;
        r.normed = at::empty_like(x);
        kernels::RmsNormRowsArgs a;
        a.x = x.data_ptr();
        a.residual = residual.defined() ? residual.data_ptr() : nullptr;
        a.weight = w.data_ptr();
        a.sum = residual.defined() ? r.sum.data_ptr() : nullptr;
        a.out = r.normed.data_ptr();
        a.rows = x.size(0);
        a.width = x.size(1);
        a.eps = static_cast<float>(eps);
        a.dtype = kernel_call::dtype(t);
        a.stream = kernel_call::stream(x);
        kernel_call::check(kernels::rms_norm_rows(a), "add + rms_norm kernel on {} [{} x {}]", x.device().str(), a.rows,
                           a.width);
        return r;
    }
#endif
    SumAndNorm r;
    r.sum = residual.defined() ? x + residual : x;
    r.normed = rms_norm(r.sum, w, eps);
    return r;
}

at::Tensor qkv_to_cache(const at::Tensor& qkv, const CachedHeads& h, const at::Tensor& q_norm, const at::Tensor& k_norm,
                        double eps, const RopeTables& rope, const at::Tensor& slot, const at::Tensor& keys,
                        const at::Tensor& values) {
    const std::int64_t t = qkv.size(0), d = h.head_dim;
    HSRING_ASSERT(qkv.dim() == 2 && qkv.size(1) == (h.heads + 2 * h.kv_heads) * d && slot.numel() == t &&
                      q_norm.defined() == k_norm.defined(),
                  "qkv_to_cache: qkv {} for {} + 2 x {} heads of {}", shape_str(qkv.sizes()), h.heads, h.kv_heads, d);
#if HSRING_KERNELS_ON
    const auto dt = qkv.scalar_type();
    const at::Device dev = qkv.device();
    const bool norms = !q_norm.defined() || (kernel_tensor(q_norm, dt, dev) && kernel_tensor(k_norm, dt, dev) &&
                                             q_norm.numel() == d && k_norm.numel() == d);
    if (kernel_call::supported(dt) && kernel_tensor(qkv, dt, dev) && norms && cache_ok(keys, values, dt, dev) &&
        keys.size(2) == h.kv_heads && keys.size(3) == d && kernel_tensor(rope.cos, dt, dev) &&
        kernel_tensor(rope.sin, dt, dev) && rope.cos.sizes() == at::IntArrayRef{t, d} &&
        rope.sin.sizes() == rope.cos.sizes() && kernel_tensor(slot, at::kLong, dev) &&
        kernels::cached_attention_supports(cache_shape(keys, h.heads), 1, kernel_call::dtype(dt))) {
        const c10::cuda::CUDAGuard guard(dev);
        at::Tensor q = at::empty({t, h.heads, d}, qkv.options());
        kernels::QkvToCacheArgs a;
        a.cache = cache_shape(keys, h.heads);
        a.tokens = t;
        a.qkv = qkv.data_ptr();
        a.q_norm = q_norm.defined() ? q_norm.data_ptr() : nullptr;
        a.k_norm = k_norm.defined() ? k_norm.data_ptr() : nullptr;
        a.eps = static_cast<float>(eps);
        a.cos = rope.cos.data_ptr();
        a.sin = rope.sin.data_ptr();
        a.slot = slot.data_ptr<std::int64_t>();
        a.keys = keys.data_ptr();
        a.values = values.data_ptr();
        a.q_out = q.data_ptr();
        a.dtype = kernel_call::dtype(dt);
        a.stream = kernel_call::stream(qkv);
        kernel_call::check(kernels::qkv_to_cache(a), "qkv_to_cache kernel on {} [{} tokens, {} + {} heads of {}]",
                           dev.str(), t, h.heads, h.kv_heads, d);
        return q;
    }
#endif
    auto parts = qkv.split({h.heads * d, h.kv_heads * d, h.kv_heads * d}, 1);
    at::Tensor q = parts[0].view({t, h.heads, d}), k = parts[1].view({t, h.kv_heads, d});
    const at::Tensor v = parts[2].reshape({t, h.kv_heads, d});
    if (q_norm.defined()) {
        q = rms_norm(q, q_norm, eps);
        k = rms_norm(k, k_norm, eps);
    }
    q = apply_rope(q, rope);
    k = apply_rope(k, rope);
    const std::int64_t slots = keys.size(0) * keys.size(1);
    keys.view({slots, h.kv_heads, d}).index_copy_(0, slot, k.to(keys.scalar_type()));
    values.view({slots, h.kv_heads, d}).index_copy_(0, slot, v.to(values.scalar_type()));
    return q;
}

at::Tensor cached_attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                            const at::Tensor& positions, std::int64_t n, std::int64_t window, double scale) {
    const std::int64_t rows = keys.size(0), t = q.size(0), hq = q.size(1), d = q.size(2), hkv = keys.size(2);
    HSRING_ASSERT(q.dim() == 3 && keys.dim() == 4 && t == rows * n && positions.numel() == t && hq % hkv == 0 &&
                      window >= 1 && window <= keys.size(1),
                  "cached_attention: q {} against a cache {}, {} new tokens per row, window {}", shape_str(q.sizes()),
                  shape_str(keys.sizes()), n, window);
#if HSRING_KERNELS_ON
    const auto dt = q.scalar_type();
    const at::Device dev = q.device();
    if (kernel_call::supported(dt) && kernel_tensor(q, dt, dev) && cache_ok(keys, values, dt, dev) &&
        keys.size(3) == d && kernel_tensor(positions, at::kLong, dev) &&
        kernels::cached_attention_supports(cache_shape(keys, hq), n, kernel_call::dtype(dt))) {
        const c10::cuda::CUDAGuard guard(dev);
        kernels::CachedAttentionArgs a;
        a.cache = cache_shape(keys, hq);
        a.n = n;
        a.window = window;
        a.scale = static_cast<float>(scale);
        a.q = q.data_ptr();
        a.keys = keys.data_ptr();
        a.values = values.data_ptr();
        a.positions = positions.data_ptr<std::int64_t>();
        at::Tensor workspace = at::empty({kernels::cached_attention_workspace(a)}, q.options().dtype(at::kFloat));
        a.workspace = workspace.data_ptr<float>();
        at::Tensor out = at::empty_like(q);
        a.out = out.data_ptr();
        a.dtype = kernel_call::dtype(dt);
        a.stream = kernel_call::stream(q);
        kernel_call::check(kernels::cached_attention(a), "cached attention kernel on {} [{} rows x {} tokens, {} heads, window {}]",
                           dev.str(), rows, n, hq, window);
        return out;
    }
#endif
    // Which keys each query sees (key j <= its position), [rows, 1, rep * n, window]: the query
    // heads that share a kv head are stacked along the query axis (GQA without repeating keys).
    const std::int64_t rep = hq / hkv;
    const auto longs = at::TensorOptions().dtype(at::kLong).device(q.device());
    const at::Tensor mask = (at::arange(window, longs).view({1, 1, window}) <= positions.view({rows, n, 1}))
                                .view({rows, 1, 1, n, window})
                                .expand({rows, 1, rep, n, window})
                                .reshape({rows, 1, rep * n, window});
    SdpaBackendScope backend(AttentionKernel::Efficient, q.is_cuda());
    const at::Tensor qg = q.view({rows, n, hkv, rep, d}).permute({0, 2, 3, 1, 4}).reshape({rows, hkv, rep * n, d});
    auto kv = [&](const at::Tensor& c) { return c.narrow(1, 0, window).transpose(1, 2); };
    const at::Tensor o = at::scaled_dot_product_attention(qg, kv(keys), kv(values), mask, 0.0, /*is_causal=*/false, scale);
    return o.view({rows, hkv, rep, n, d}).permute({0, 3, 1, 2, 4}).reshape({t, hq, d});
}

} // namespace hsring::model
