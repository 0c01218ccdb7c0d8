#include "model/dflash_decode.hpp"

#include "hsring/error.hpp"
#include "model/attention.hpp"
#include "model/ops.hpp"

#include <ATen/ATen.h>

#include <cmath>

namespace hsring::model {

DFlashDecodeState::DFlashDecodeState(DFlashDrafter& drafter, const TargetHead& head, std::int64_t capacity,
                                     at::Device device, at::ScalarType dtype)
    : config_(drafter->config()), capacity_(capacity), dtype_(dtype) {
    if (capacity < 1) fail("DFlash decode state: capacity must be >= 1 context rows, got {}", capacity);
    at::NoGradGuard no_grad;
    auto cast = [&](const at::Tensor& w) { return w.detach().to(device, dtype); };
    const std::int64_t h = config_.hidden_size;
    embed_ = head.embed.to(device, dtype);
    inv_freq_ = drafter->inv_freq().to(device);
    const at::Tensor fc = cast(drafter->fc->weight);  // [H, L*H]
    for (std::int64_t i = 0; i < config_.num_context_layers(); ++i) fc_.push_back(fc.narrow(1, i * h, h).contiguous());
    hidden_norm_ = cast(drafter->hidden_norm->weight);
    norm_ = cast(drafter->norm->weight);
    const auto opts = at::TensorOptions().device(device).dtype(dtype);
    for (const auto& m : *drafter->layers) {
        const auto* l = m->as<DFlashLayerImpl>();
        const auto& a = *l->self_attn;
        layers_.push_back({cast(l->input_layernorm->weight), cast(a.q_proj->weight), cast(a.k_proj->weight),
                           cast(a.v_proj->weight), cast(a.o_proj->weight), cast(a.q_norm->weight),
                           cast(a.k_norm->weight), cast(l->post_attention_layernorm->weight),
                           cast(l->mlp->gate_proj->weight), cast(l->mlp->up_proj->weight),
                           cast(l->mlp->down_proj->weight)});
        // Zeros, not empty: rows past length() are never read, but stay finite anyway.
        keys_.push_back(at::zeros({capacity, config_.num_kv_heads, config_.head_dim}, opts));
        values_.push_back(at::zeros({capacity, config_.num_kv_heads, config_.head_dim}, opts));
    }
}

void DFlashDecodeState::extend(const at::Tensor& captured) {
    const std::int64_t l = config_.num_context_layers(), h = config_.hidden_size;
    if (captured.dim() != 3 || captured.size(0) != l || captured.size(2) != h)
        fail("DFlash decode state: context rows must be [{} layers, n, {}], got {}", l, h, shape_str(captured.sizes()));
    const std::int64_t n = captured.size(1);
    if (length_ + n > capacity_)
        fail("DFlash decode state: {} context rows do not fit after {} (capacity {})", n, length_, capacity_);
    if (n == 0) return;
    at::NoGradGuard no_grad;
    const at::Tensor x = captured.to(dtype_);
    at::Tensor fused = at::matmul(x[0], fc_[0].t());
    for (std::int64_t i = 1; i < l; ++i) fused = at::addmm(fused, x[i], fc_[static_cast<std::size_t>(i)].t());
    fused = rms_norm(fused, hidden_norm_, config_.rms_norm_eps);
    const at::Tensor positions =
        at::arange(length_, length_ + n, at::TensorOptions().dtype(at::kLong).device(fused.device()));
    const RopeTables rope = rope_tables(inv_freq_, positions, dtype_, rope_attention_factor(config_.rope_scaling));
    const std::int64_t hkv = config_.num_kv_heads, d = config_.head_dim;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
        const Layer& w = layers_[i];
        keys_[i].narrow(0, length_, n)
            .copy_(apply_rope(rms_norm(at::linear(fused, w.k).view({n, hkv, d}), w.k_norm, config_.rms_norm_eps), rope));
        values_[i].narrow(0, length_, n).copy_(at::linear(fused, w.v).view({n, hkv, d}));
    }
    length_ += n;
}

void DFlashDecodeState::crop(std::int64_t length) {
    if (length < 0 || length > length_)
        fail("DFlash decode state: cannot crop to {} rows: it holds {} (crop only shortens)", length, length_);
    length_ = length;
}

at::Tensor DFlashDecodeState::draft(std::int64_t last, std::int64_t b) const {
    if (b < 2 || b > config_.block_size)
        fail("DFlash decode state: a block of {} slots (2..{} allowed)", b, config_.block_size);
    at::NoGradGuard no_grad;
    const at::Device dev = embed_.device();
    const auto longs = at::TensorOptions().device(dev).dtype(at::kLong);
    const at::Tensor tokens = at::cat({at::full({1}, last, longs), at::full({b - 1}, config_.mask_token_id, longs)});
    const RopeTables rope = rope_tables(inv_freq_, at::arange(length_, length_ + b, longs), dtype_, rope_attention_factor(config_.rope_scaling));
    const std::int64_t hq = config_.num_heads, hkv = config_.num_kv_heads, d = config_.head_dim;
    const double eps = config_.rms_norm_eps, scale = 1.0 / std::sqrt(static_cast<double>(d));
    const std::int64_t rep = hq / hkv;
    // The memory-efficient kernel: no per-shape plan, and the context grows every step.
    SdpaBackendScope backend(AttentionKernel::Efficient, embed_.is_cuda());
    at::Tensor x = embed_.index_select(0, tokens);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
        const Layer& w = layers_[i];
        const at::Tensor hn = rms_norm(x, w.input_norm, eps);
        const at::Tensor q = apply_rope(rms_norm(at::linear(hn, w.q).view({b, hq, d}), w.q_norm, eps), rope);
        const at::Tensor k_blk = apply_rope(rms_norm(at::linear(hn, w.k).view({b, hkv, d}), w.k_norm, eps), rope);
        const at::Tensor v_blk = at::linear(hn, w.v).view({b, hkv, d});
        // Keys [1, Hkv, rows, D]: every block row sees every context row and the whole block
        // (non-causal, no mask). GQA without repeating K/V: the r query heads of one kv head become
        // r x b query rows, as block_attention does.
        const at::Tensor k = at::cat({keys_[i].narrow(0, 0, length_), k_blk}).transpose(0, 1).unsqueeze(0);
        const at::Tensor v = at::cat({values_[i].narrow(0, 0, length_), v_blk}).transpose(0, 1).unsqueeze(0);
        const at::Tensor qg = q.view({b, hkv, rep, d}).permute({1, 2, 0, 3}).reshape({1, hkv, rep * b, d});
        at::Tensor o = at::scaled_dot_product_attention(qg, k, v, {}, 0.0, /*is_causal=*/false, scale);
        o = o.view({hkv, rep, b, d}).permute({2, 0, 1, 3}).reshape({b, hq * d});
        x = x + at::linear(o, w.o);
        const at::Tensor m = rms_norm(x, w.post_norm, eps);
        x = x + at::linear(at::silu(at::linear(m, w.gate)) * at::linear(m, w.up), w.down);
    }
    return rms_norm(x, norm_, eps);
}

} // namespace hsring::model
