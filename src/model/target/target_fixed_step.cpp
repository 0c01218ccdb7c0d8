// TargetModel's fixed-shape step for the decode engine (decode_graphs.hpp): forward_static, which
// models it serves (graphable), and the bytes a decode step reads (the memory-bound limit).
#include "model/target/target.hpp"

#include "hsring/error.hpp"
#include "model/target/kv_cache.hpp"
#include "model/ops/ops.hpp"

#include <ATen/ATen.h>

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
    // Where each new key goes (row * capacity + position), and which keys each query sees
    // (key j <= its position), [rows, 1, rep * n, window]: the query heads that share a kv head are
    // stacked along the query axis (GQA without repeating keys), as CacheExtension does.
    const std::int64_t hkv = shape_.num_kv_heads, rep = shape_.num_heads / hkv, d = shape_.head_dim;
    const at::Tensor slot = at::arange(rows, longs).mul(cap).view({rows, 1}).expand({rows, n}).reshape({t}) + positions;
    const at::Tensor mask = (at::arange(window, longs).view({1, 1, window}) <= positions.view({rows, n, 1}))
                                .view({rows, 1, 1, n, window})
                                .expand({rows, 1, rep, n, window})
                                .reshape({rows, 1, rep * n, window});
    const RopeTables rope = rope_tables(inv_freq_, positions, dtype_, rope_attention_factor_);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    SdpaBackendScope backend(AttentionKernel::Efficient, device_.is_cuda());
    at::Tensor h = embed_.index_select(0, tokens);
    for (std::int64_t i = 0; i < shape_.num_layers; ++i) {
        const at::Tensor& keys = cache.keys(i);
        const at::Tensor& values = cache.values(i);
        h = layer_forward(layers_[static_cast<std::size_t>(i)], h, rope,
                          [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Layer&) {
                              keys.view({rows * cap, hkv, d}).index_copy_(0, slot, k.to(keys.scalar_type()));
                              values.view({rows * cap, hkv, d}).index_copy_(0, slot, v.to(values.scalar_type()));
                              const at::Tensor qg =
                                  q.view({rows, n, hkv, rep, d}).permute({0, 2, 3, 1, 4}).reshape({rows, hkv, rep * n, d});
                              auto kv = [&](const at::Tensor& c) { return c.narrow(1, 0, window).transpose(1, 2); };
                              const at::Tensor o = at::scaled_dot_product_attention(qg, kv(keys), kv(values), mask, 0.0,
                                                                                    /*is_causal=*/false, scale);
                              return o.view({rows, hkv, rep, n, d}).permute({0, 3, 1, 2, 4}).reshape({t, hkv * rep, d});
                          });
        report_layer(static_cast<int>(i), h, layer_ids, on_layer);
    }
    return dense(rms_norm(h, final_norm_, shape_.rms_norm_eps), lm_head_);  // graphable: not gpt-oss's norm
}

} // namespace hsring::model
