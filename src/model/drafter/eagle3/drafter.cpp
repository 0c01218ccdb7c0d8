#include "model/drafter/eagle3/drafter.hpp"

#include "hsring/error.hpp"
#include "model/io/safetensors.hpp"
#include "model/ops/fused_swiglu.hpp"
#include "model/ops/ops.hpp"
#include "model/ops/ttt_attention.hpp"

#include <ATen/ATen.h>

#include <cmath>

namespace hsring::model {

Eagle3AttentionImpl::Eagle3AttentionImpl(const Eagle3Config& c, at::Device device) {
    const std::int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim, in = 2 * c.hidden_size;
    q_proj = register_module("q_proj", Projection(in, q, device));
    k_proj = register_module("k_proj", Projection(in, kv, device));
    v_proj = register_module("v_proj", Projection(in, kv, device));
    o_proj = register_module("o_proj", Projection(q, c.hidden_size, device));
}

Eagle3MLPImpl::Eagle3MLPImpl(const Eagle3Config& c, at::Device device) {
    gate_proj = register_module("gate_proj", Projection(c.hidden_size, c.intermediate_size, device));
    up_proj = register_module("up_proj", Projection(c.hidden_size, c.intermediate_size, device));
    down_proj = register_module("down_proj", Projection(c.intermediate_size, c.hidden_size, device));
}

Eagle3LayerImpl::Eagle3LayerImpl(const Eagle3Config& c, at::Device device) {
    self_attn = register_module("self_attn", Eagle3Attention(c, device));
    mlp = register_module("mlp", Eagle3MLP(c, device));
    input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
    hidden_norm = register_module("hidden_norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
    post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

Eagle3DrafterImpl::Eagle3DrafterImpl(Eagle3Config c, std::uint64_t seed, at::Device device) : config_(std::move(c)) {
    config_.validate("EAGLE-3 drafter");
    fc = register_module("fc", Projection(3 * config_.hidden_size, config_.hidden_size, device));
    midlayer = register_module("midlayer", Eagle3Layer(config_, device));
    norm = register_module("norm", RMSNorm(config_.hidden_size, config_.rms_norm_eps));
    to(device);
    init_drafter_weights(*this, seed, device);
    inv_freq_ = rope_inv_freq(config_.head_dim, config_.rope_theta, config_.rope_scaling).to(device);
}

void Eagle3DrafterImpl::set_vocab(const at::Tensor& lm_head_rows, const at::Tensor& d2t_map,
                                  const at::Tensor& t2d_map) {
    const auto& c = config_;
    if (lm_head_rows.dim() != 2 || lm_head_rows.size(0) != c.draft_vocab_size || lm_head_rows.size(1) != c.hidden_size ||
        d2t_map.numel() != c.draft_vocab_size || t2d_map.numel() != c.vocab_size)
        fail("EAGLE-3 drafter: LM head rows {}, d2t of {} and t2d of {} entries do not fit a draft vocabulary of {} "
             "(target {}, hidden {})", shape_str(lm_head_rows.sizes()), d2t_map.numel(), t2d_map.numel(),
             c.draft_vocab_size, c.vocab_size, c.hidden_size);
    lm_head = register_buffer("lm_head", lm_head_rows.detach().to(at::kFloat));
    d2t = register_buffer("d2t", d2t_map.to(at::kLong));
    t2d = register_buffer("t2d", t2d_map.to(at::kBool));
}

at::Tensor Eagle3DrafterImpl::draft_ids() const {
    return at::arange(config_.draft_vocab_size, d2t.options()) + d2t;
}

std::vector<at::Tensor> Eagle3DrafterImpl::forward_steps(const Eagle3Rows& rows, const at::Tensor& embed,
                                                         at::ScalarType dt) {
    const auto& c = config_;
    const std::int64_t r = rows.positions.size(0), h = c.hidden_size, hq = c.num_heads, hkv = c.num_kv_heads,
                       d = c.head_dim;
    if (rows.fused.dim() != 3 || rows.fused.size(0) != 3 || rows.fused.size(1) != r || rows.fused.size(2) != h)
        fail("EAGLE-3 drafter: fused rows must be [3, {}, {}], got {}", r, h, shape_str(rows.fused.sizes()));
    // fc over the concatenated layers as a sum of per-layer products (no [R, 3H] copy).
    const at::Tensor w_fc = fc->weight.to(dt);
    const at::Tensor fused = rows.fused.to(dt);
    at::Tensor hidden = at::matmul(fused[0], w_fc.narrow(1, 0, h).t());
    for (std::int64_t i = 1; i < 3; ++i) hidden = at::addmm(hidden, fused[i], w_fc.narrow(1, i * h, h).t());

    const Eagle3LayerImpl& l = *midlayer;
    const double eps = c.rms_norm_eps, scale = 1.0 / std::sqrt(static_cast<double>(d));
    const double rope_factor = rope_attention_factor(c.rope_scaling);
    // The layer's weights cast to the compute dtype once for all steps (as autocast's weight cache
    // does in SpecForge's trainer): one cast each, its gradient summed over the steps; casting per
    // step kept K copies for the backward (4.6 GiB at Qwen3-8B dims) and K casts each way.
    const auto& a = *l.self_attn;
    const auto& mlp = *l.mlp;
    const at::Tensor w_q = a.q_proj->weight.to(dt), w_k = a.k_proj->weight.to(dt), w_v = a.v_proj->weight.to(dt),
                     w_o = a.o_proj->weight.to(dt), w_gate = mlp.gate_proj->weight.to(dt),
                     w_up = mlp.up_proj->weight.to(dt), w_down = mlp.down_proj->weight.to(dt),
                     n_in = l.input_layernorm->weight.to(dt), n_hidden = l.hidden_norm->weight.to(dt),
                     n_post = l.post_attention_layernorm->weight.to(dt);
    std::vector<at::Tensor> keys, values, outs;
    at::Tensor causal = rows.same_seq_causal;
    for (std::size_t k = 0; k < rows.step_tokens.size(); ++k) {
        const at::Tensor emb = at::embedding(embed, rows.step_tokens[k]).detach().to(dt);
        const at::Tensor x = at::cat({rms_norm(emb, n_in, eps), rms_norm(hidden, n_hidden, eps)}, -1);
        const RopeTables rope =
            rope_tables(inv_freq_, rows.positions + static_cast<std::int64_t>(k), dt, rope_factor);
        at::Tensor q = apply_rope(dense(x, w_q).view({r, hq, d}), rope);
        keys.push_back(apply_rope(dense(x, w_k).view({r, hkv, d}), rope));
        values.push_back(dense(x, w_v).view({r, hkv, d}));
        if (!causal.defined() && !ttt_attention_flash(q, rows.seqs)) {
            if (rows.seqs.cu.size() < 2 || rows.seqs.total() != r)
                fail("EAGLE-3 drafter: the rows' sequences cover {} of {} rows", rows.seqs.cu.empty() ? 0 : rows.seqs.total(), r);
            causal = packed_causal_mask(rows.seqs, q.device());  // once for all steps
        }
        const at::Tensor o = ttt_attention(q, keys, values, rows.seqs, causal, scale);
        const at::Tensor y = hidden + dense(o.reshape({r, hq * d}), w_o);
        const at::Tensor m = rms_norm(y, n_post, eps);
        hidden = y + dense(fused_swiglu(dense(m, w_gate), dense(m, w_up)), w_down);
        outs.push_back(hidden);
    }
    return outs;
}

at::Tensor Eagle3DrafterImpl::logits(const at::Tensor& out, at::ScalarType dt, const at::Tensor& head_rows) {
    HSRING_ASSERT(lm_head.defined(), "EAGLE-3 drafter: the LM head rows were never set");
    return dense(norm->forward(out.to(dt)), head_rows.defined() ? head_rows : lm_head.to(dt));
}

} // namespace hsring::model
