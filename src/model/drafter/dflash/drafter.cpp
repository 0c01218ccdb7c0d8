#include "model/drafter/dflash/drafter.hpp"

#include "hsring/error.hpp"
#include "model/ops/attention.hpp"
#include "model/ops/fp8_linear.hpp"
#include "model/ops/fused_swiglu.hpp"
#include "model/ops/ops.hpp"
#include "model/ops/recompute.hpp"
#include "model/io/safetensors.hpp"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <cmath>
#include <memory>
#include <utility>

namespace hsring::model {
namespace {


// DFlashLayerImpl::weights() order.
enum LayerWeight : std::size_t { InputNorm, Q, K, V, O, QNorm, KNorm, PostNorm, Gate, Up, Down, kLayerWeights };

// What every layer of one forward shares besides its weights.
struct LayerShared {
    RopeTables ctx_rope, blk_rope;
    BlockAttention plan;
    std::int64_t hq = 0, hkv = 0, d = 0;
    double eps = 0, scale = 0;
    bool fp8 = false;  // the projections in FP8 (fp8_linear.hpp)
};

// One Qwen3 decoder layer on the block rows x [rows, H], given the fused context [T, H]: a
// function of its inputs only, so a recomputation in backward gives the same result.
at::Tensor layer_forward(const at::Tensor& x, const at::Tensor& ctx, const std::vector<at::Tensor>& w,
                         const LayerShared& s) {
    HSRING_ASSERT(w.size() == kLayerWeights);
    const std::int64_t rows = x.size(0), t = ctx.size(0);
    at::Tensor h = rms_norm(x, w[InputNorm], s.eps);
    // Projections sharing an input run together: in FP8 the input is quantized once; in the
    // compute dtype the k/v weights (context rows and block rows) are cast once.
    auto project = [&s](const at::Tensor& in, const std::vector<at::Tensor>& ws) {
        if (s.fp8) return fp8_linears(in, ws);
        std::vector<at::Tensor> out;
        for (const auto& wt : ws) out.push_back(dense(in, wt));
        return out;
    };
    const at::Tensor wk = s.fp8 ? w[K] : as_dtype_of(w[K], h), wv = s.fp8 ? w[V] : as_dtype_of(w[V], h);
    // take(): a raw projection dies with the expression that uses it, as a temporary would
    // (what a forward without grad keeps alive stays as it was).
    auto take = [](at::Tensor& p) { return std::exchange(p, at::Tensor()); };
    auto qkv = project(h, {w[Q], wk, wv});
    auto kv_ctx = project(ctx, {wk, wv});
    at::Tensor q = apply_rope(rms_norm(take(qkv[0]).view({rows, s.hq, s.d}), w[QNorm], s.eps), s.blk_rope);
    at::Tensor k_blk = apply_rope(rms_norm(take(qkv[1]).view({rows, s.hkv, s.d}), w[KNorm], s.eps), s.blk_rope);
    at::Tensor v_blk = take(qkv[2]).view({rows, s.hkv, s.d});
    at::Tensor k_ctx = apply_rope(rms_norm(take(kv_ctx[0]).view({t, s.hkv, s.d}), w[KNorm], s.eps), s.ctx_rope);
    at::Tensor v_ctx = take(kv_ctx[1]).view({t, s.hkv, s.d});
    at::Tensor o = block_attention(q, k_ctx, v_ctx, k_blk, v_blk, s.plan, s.scale);
    at::Tensor y = x + project(o.reshape({rows, s.hq * s.d}), {w[O]})[0];
    at::Tensor m = rms_norm(y, w[PostNorm], s.eps);
    auto gate_up = project(m, {w[Gate], w[Up]});
    return y + project(fused_swiglu(take(gate_up[0]), take(gate_up[1])), {w[Down]})[0];
}

} // namespace

DFlashAttentionImpl::DFlashAttentionImpl(const DFlashConfig& c, at::Device device) {
    const std::int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
    q_proj = register_module("q_proj", Projection(c.hidden_size, q, device));
    k_proj = register_module("k_proj", Projection(c.hidden_size, kv, device));
    v_proj = register_module("v_proj", Projection(c.hidden_size, kv, device));
    o_proj = register_module("o_proj", Projection(q, c.hidden_size, device));
    q_norm = register_module("q_norm", RMSNorm(c.head_dim, c.rms_norm_eps));
    k_norm = register_module("k_norm", RMSNorm(c.head_dim, c.rms_norm_eps));
}

DFlashMLPImpl::DFlashMLPImpl(const DFlashConfig& c, at::Device device) {
    gate_proj = register_module("gate_proj", Projection(c.hidden_size, c.intermediate_size, device));
    up_proj = register_module("up_proj", Projection(c.hidden_size, c.intermediate_size, device));
    down_proj = register_module("down_proj", Projection(c.intermediate_size, c.hidden_size, device));
}

at::Tensor DFlashMLPImpl::forward(const at::Tensor& x) const {
    at::Tensor gate = dense(x, gate_proj->weight);
    return dense(at::silu(gate) * dense(x, up_proj->weight), down_proj->weight);
}

DFlashLayerImpl::DFlashLayerImpl(const DFlashConfig& c, at::Device device) {
    self_attn = register_module("self_attn", DFlashAttention(c, device));
    mlp = register_module("mlp", DFlashMLP(c, device));
    input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
    post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

std::vector<at::Tensor> DFlashLayerImpl::weights() const {
    const auto& a = *self_attn;
    return {input_layernorm->weight, a.q_proj->weight,  a.k_proj->weight, a.v_proj->weight,
            a.o_proj->weight,        a.q_norm->weight,  a.k_norm->weight, post_attention_layernorm->weight,
            mlp->gate_proj->weight,  mlp->up_proj->weight, mlp->down_proj->weight};
}

DFlashDrafterImpl::DFlashDrafterImpl(DFlashConfig c, std::uint64_t seed, at::Device device) : config_(std::move(c)) {
    config_.validate("DFlash drafter");
    layers = register_module("layers", torch::nn::ModuleList());
    for (std::int64_t i = 0; i < config_.num_layers; ++i) layers->push_back(DFlashLayer(config_, device));
    fc = register_module("fc", Projection(config_.num_context_layers() * config_.hidden_size, config_.hidden_size, device));
    hidden_norm = register_module("hidden_norm", RMSNorm(config_.hidden_size, config_.rms_norm_eps));
    norm = register_module("norm", RMSNorm(config_.hidden_size, config_.rms_norm_eps));
    to(device);
    init_drafter_weights(*this, seed, device);
    inv_freq_ = rope_inv_freq(config_.head_dim, config_.rope_theta, config_.rope_scaling).to(device);
}

at::Tensor DFlashDrafterImpl::fuse_context(const at::Tensor& context, at::ScalarType dtype) {
    const std::int64_t l = config_.num_context_layers(), h = config_.hidden_size;
    if (context.dim() != 3 || context.size(0) != l || context.size(2) != h)
        fail("DFlash drafter: context hidden states must be [{} layers, T, {}], got {}", l, h,
             shape_str(context.sizes()));
    at::Tensor w = fc->weight.to(dtype);  // [H, L*H]: column block i multiplies layer i
    at::Tensor x = context.to(dtype);
    at::Tensor out = at::matmul(x[0], w.narrow(1, 0, h).t());
    for (std::int64_t i = 1; i < l; ++i) out = at::addmm(out, x[i], w.narrow(1, i * h, h).t());
    return hidden_norm->forward(out);
}

at::Tensor DFlashDrafterImpl::forward(const DFlashInputs& in) {
    HSRING_ASSERT(in.blocks != nullptr);
    const DFlashBlocks& blocks = *in.blocks;
    const at::ScalarType dt = in.compute_dtype;
    const auto& c = config_;
    const std::int64_t hq = c.num_heads, hkv = c.num_kv_heads, d = c.head_dim, rows = blocks.rows();
    const std::int64_t t = in.context.size(1);
    // Shorter blocks than trained are speculative decoding's last block (drafted short, as the public
    // DFlash loop does); longer ones were never trained.
    if (blocks.block_size < 2 || blocks.block_size > c.block_size)
        fail("DFlash drafter: blocks of {} slots, but the drafter was built for block_size {} (2..{} allowed)",
             blocks.block_size, c.block_size, c.block_size);
    HSRING_ASSERT(in.block_embeds.size(0) == rows && blocks.context_positions.size(0) == t);
    if (rows == 0) return at::empty({0, c.hidden_size}, in.block_embeds.options().dtype(dt));

    const at::Tensor ctx = fuse_context(in.context, dt);
    // Shared by every layer, and kept alive by each recomputing layer's backward.
    auto shared = std::make_shared<LayerShared>();
    const double rope_factor = rope_attention_factor(c.rope_scaling);  // YaRN's; else 1
    shared->ctx_rope = rope_tables(inv_freq_, blocks.context_positions, dt, rope_factor);
    shared->blk_rope = rope_tables(inv_freq_, blocks.block_positions, dt, rope_factor);
    shared->plan = plan_block_attention(blocks.anchors, blocks.seq_begin, blocks.block_size, t, in.attention,
                                        hq / hkv, ctx.device(), dt);
    shared->hq = hq;
    shared->hkv = hkv;
    shared->d = d;
    shared->eps = c.rms_norm_eps;
    shared->scale = 1.0 / std::sqrt(static_cast<double>(d));
    shared->fp8 = in.fp8_matmul;

    at::Tensor x = in.block_embeds.to(dt);
    for (const auto& m : *layers) {
        const std::vector<at::Tensor> w = m->as<DFlashLayerImpl>()->weights();
        if (!in.recompute_layers) {
            x = layer_forward(x, ctx, w, *shared);
            continue;
        }
        std::vector<at::Tensor> inputs{x, ctx};
        inputs.insert(inputs.end(), w.begin(), w.end());
        x = recompute_in_backward(
            [shared](const std::vector<at::Tensor>& v) {
                return layer_forward(v[0], v[1], std::vector<at::Tensor>(v.begin() + 2, v.end()), *shared);
            },
            inputs);
    }
    return norm->forward(x);
}

} // namespace hsring::model
