// TargetModel's fixed-shape step for the decode engine (decode_graphs.hpp): forward_static, which
// models it serves (graphable), and the bytes a decode step reads (the memory-bound limit).
#include "model/target/target.hpp"

#include "hsring/error.hpp"
#include "model/target/kv_cache.hpp"
#include "model/ops/decode_step_ops.hpp"
#include "model/ops/fused_swiglu.hpp"
#include "model/ops/ops.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

namespace hsring::model {

std::uint64_t TargetModel::decode_bytes() const {
    std::uint64_t n = 0;
    auto add = [&](const at::Tensor& t) {
        if (t.defined()) n += static_cast<std::uint64_t>(t.nbytes());
    };
    for (const Layer& l : layers_) {
        for (const at::Tensor* t : {&l.input_norm, &l.qkv, &l.q_norm, &l.k_norm, &l.o, &l.post_norm, &l.gate_up, &l.down,
                                    &l.qkv_bias, &l.o_bias, &l.sinks, &l.moe.router, &l.moe.gate_up, &l.moe.down,
                                    &l.oss_moe.router, &l.oss_moe.router_bias, &l.oss_moe.gate_up,
                                    &l.oss_moe.gate_up_bias, &l.oss_moe.down, &l.oss_moe.down_bias})
            add(*t);
        for (const Fp8Weight* w : {&l.qkv8, &l.o8, &l.gate_up8, &l.down8}) {
            add(w->data);
            add(w->scale);
        }
    }
    add(final_norm_);
    add(lm_head_);
    return n;
}

bool TargetModel::graphable() const {
    if (shape_.num_experts > 0 || shape_.attention_sinks()) return false;
    for (const Layer& l : layers_)
        if (l.qkv8.defined() || l.o8.defined() || l.gate_up8.defined() || l.down8.defined() || l.sinks.defined() ||
            l.window > 0)
            return false;
    return true;
}

at::Tensor TargetModel::forward_static(const at::Tensor& ids, std::int64_t n, std::int64_t window, KVCache& cache,
                                       const std::vector<int>& layer_ids, const LayerCallback& on_layer) {
    const std::int64_t rows = cache.rows(), cap = cache.capacity(), t = rows * n;
    HSRING_ASSERT(graphable() && ids.dim() == 2 && ids.size(0) == 2 && ids.size(1) == t && n >= 1 && window >= 1 &&
                      window <= cap && cache.device() == device_ && cache.num_layers() == shape_.num_layers,
                  "forward_static: ids {} for {} rows x {} tokens, window {} of {}", shape_str(ids.sizes()), rows, n,
                  window, cap);
    at::NoGradGuard no_grad;
    const at::Tensor tokens = ids[0], positions = ids[1];
    const auto longs = at::TensorOptions().dtype(at::kLong).device(device_);
    const CachedHeads heads{shape_.num_heads, shape_.num_kv_heads, shape_.head_dim};
    const double eps = shape_.rms_norm_eps, scale = 1.0 / std::sqrt(static_cast<double>(heads.head_dim));
    // Where each new key goes: row * capacity + position.
    const at::Tensor slot = at::arange(rows, longs).mul(cap).view({rows, 1}).expand({rows, n}).reshape({t}) + positions;
    const RopeTables rope = rope_tables(inv_freq_, positions, dtype_, rope_attention_factor_);
    // Each residual add runs with the norm after it (the next layer's input norm, or the final
    // norm): decode_step_ops.hpp. Otherwise the ops of layer_forward, in its order.
    SumAndNorm cur = add_rms_norm(embed_.index_select(0, tokens), {}, layers_.front().input_norm, eps);
    for (std::int64_t i = 0; i < shape_.num_layers; ++i) {
        const Layer& l = layers_[static_cast<std::size_t>(i)];
        at::Tensor qkv = dense_rows(cur.normed, l.qkv);
        if (l.qkv_bias.defined()) qkv = qkv + l.qkv_bias;
        const bool qk = shape_.qk_norm();
        const at::Tensor q = qkv_to_cache(qkv, heads, qk ? l.q_norm : at::Tensor(), qk ? l.k_norm : at::Tensor(), eps,
                                          rope, slot, cache.keys(i), cache.values(i));
        const at::Tensor attn = cached_attention(q, cache.keys(i), cache.values(i), positions, n, window, scale);
        at::Tensor o = dense_rows(attn.reshape({t, heads.heads * heads.head_dim}), l.o);
        if (l.o_bias.defined()) o = o + l.o_bias;
        const SumAndNorm mid = add_rms_norm(cur.sum, o, l.post_norm, eps);
        const at::Tensor gate_up = dense_rows(mid.normed, l.gate_up);
        // One row: gate and up are contiguous halves, one kernel (fused_swiglu); else ATen's two.
        const auto halves = gate_up.chunk(2, -1);
        const at::Tensor act = t == 1 ? fused_swiglu(halves[0], halves[1]) : swiglu(gate_up);
        const bool last = i + 1 == shape_.num_layers;
        cur = add_rms_norm(mid.sum, dense_rows(act, l.down), last ? final_norm_ : layers_[static_cast<std::size_t>(i + 1)].input_norm,
                           eps);
        report_layer(static_cast<int>(i), cur.sum, layer_ids, on_layer);
    }
    return dense_rows(cur.normed, lm_head_);  // graphable: not gpt-oss's norm
}

} // namespace hsring::model
