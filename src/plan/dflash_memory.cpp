// The DFlash drafter's memory arithmetic (see dflash_memory.hpp). Element counts follow what the
// code keeps alive; the comments name the code they count.
#include "plan/dflash_memory.hpp"

#include "plan/drafter_plan.hpp"
#include "plan/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace hsring::plan {
namespace {

using u64 = std::uint64_t;
using Dims = ShapeDims;

} // namespace

std::uint64_t dflash_params(const ModelShape& s, std::uint64_t layers, std::uint64_t context_layers) {
    const Dims m(s);
    // DFlashDrafterImpl (src/model/drafter/dflash/drafter.cpp): Qwen3 layers (always q/k norms), fc
    // [H, L*H], hidden_norm, norm.
    const u64 layer = m.h * (m.q + 2 * m.k) + m.q * m.h + 3 * m.h * m.i + 2 * m.h + 2 * m.d;
    return layers * layer + context_layers * m.h * m.h + 2 * m.h;
}

namespace {

// Parameters of one drafter decoder layer (dflash_params without fc and the two norms).
u64 drafter_layer_params(const Dims& m) { return m.h * (m.q + 2 * m.k) + m.q * m.h + 3 * m.h * m.i + 2 * m.h + 2 * m.d; }

// What one drafter layer's linear weights keep for backward with [train] matmul = "fp8"
// (fp8_linear.hpp): each weight's e4m3 copy, 1 B per parameter + a 4 B scale per output row,
// instead of its compute-dtype cast; k and v twice (the block rows' and the context's products
// quantise them separately). A weight with a dimension not a multiple of 16 runs as a plain linear
// (its cast, once: cast_e bytes per parameter, 0 in fp32). Returns {bytes, parameters so covered}.
std::pair<u64, u64> fp8_layer_saved(const Dims& m, u64 cast_e) {
    struct W {
        u64 in, out, uses;
    };
    u64 bytes = 0, params = 0;
    for (const W& w : {W{m.h, m.q, 1}, W{m.h, m.k, 2}, W{m.h, m.k, 2}, W{m.q, m.h, 1}, W{m.h, m.i, 1}, W{m.h, m.i, 1},
                       W{m.i, m.h, 1}}) {
        params += w.in * w.out;
        bytes += w.in % 16 == 0 && w.out % 16 == 0 ? w.uses * (w.in * w.out + 4 * w.out) : w.in * w.out * cast_e;
    }
    return {bytes, params};
}

enum class DrafterPeak { LossChunk, LayerBackward, RecomputeForward, RecomputeFirstLayer, RecomputeLastLayer };

// What one micro-batch costs a drafter (DFlashDrafterImpl::forward, dflash_loss, chunked CE).
struct DrafterBatch {
    u64 e, rows, row, keys, mask, saved, keep, ce_rows, chunk, logits, bwd, grads, fwd_peak, bwd_peak;
    bool forward;
    // [train] recompute = "layers" (recompute.cpp): what is alive at the peak besides the weights.
    bool recompute = false;
    DrafterPeak peak = DrafterPeak::LossChunk;
    u64 peak_bytes = 0;
    u64 inputs = 0;       // checkpointed layer inputs still saved
    u64 layer = 0;        // one layer's activations while recomputed in backward (+ its keys, its output)
    u64 shared = 0;       // context, its pre-norm, RoPE, block tensors, mask (+ the final norm's input)
    u64 flowing = 0;      // the gradient flowing back to the layer and d(context) accumulated so far
    u64 casts = 0;        // bf16 weight casts alive at the peak
    u64 layer_grads = 0;  // fp32 gradients of the layers back-propagated before the peak
    u64 transient = 0;    // the peak op's own tensors (loss chunk, MLP gradients, a no-grad layer)
    u64 grads_now = 0;    // gradients of earlier micro-batches of the step
};

DrafterBatch drafter_batch(const Config& cfg, const Derived& d, Place place, const MicroBatch& mb,
                           bool grads_in_forward) {
    const Dims m(d.target);
    DrafterBatch x{};
    // bf16 compute on CUDA, fp32 on CPU (default_compute_dtype).
    x.e = place.is_cpu() ? 4 : 2;
    const u64 e = x.e, b = cfg.drafter.block_size, nl = cfg.drafter.num_layers, t = mb.tokens;
    x.rows = mb.blocks * b;
    // Saved for backward per layer and block row: layer input and its norm (2H); q projection,
    // its copy for the grouped SDPA, SDPA out, concatenated out (4Q); k projection before k_norm
    // (K); MLP input and its norm (2H); gate, up, product (3I) on a GPU, where silu(gate) * up is
    // one kernel (model/ops/fused_swiglu.cpp: silu(gate) is never kept), + silu(gate) (4I) on the CPU.
    const u64 mlp_rows = place.is_cpu() ? 4 : 3;
    x.row = 4 * m.h + 4 * m.q + m.k + mlp_rows * m.i;
    // Per layer besides: each group's concatenated keys and values [context prefix | block rows]
    // (2K per key), the context's k projection before k_norm (K per token), fp32 RMSNorm rstd
    // and attention log-sum-exp (2 + Hq + Hkv + Hq per row).
    x.keys = nl * mb.keys * 2 * m.k * e;
    const u64 per_layer = x.rows * x.row * e + t * m.k * e + x.rows * (2 + 2 * m.hq + m.hkv) * 4;
    // Shared by the layers: the fused context and its pre-norm (2H per token), the final norm's
    // input (H per row), RoPE tables, int64/fp32 block tensors, the additive attention mask
    // repeated Hq/Hkv times (plan_block_attention).
    x.mask = (m.hq / m.hkv) * mb.mask * e;
    const u64 final_norm_input = x.rows * m.h * e;
    const u64 shared_layers = 2 * t * m.h * e + 2 * m.d * e * (t + x.rows) + x.rows * 29 + t * 8 + x.mask;
    const u64 shared = shared_layers + final_norm_input;
    x.saved = nl * per_layer + x.keys + shared;
    // Rows the cross-entropy scores: never slot 0 (at most blocks x (B-1)).
    x.keep = mb.blocks * (b - 1);
    // While the loss runs: the drafter output, its scored rows and their gradient (CE saves it).
    x.ce_rows = x.rows * m.h * e + 2 * x.keep * m.h * e;
    // One chunk of logits and their gradient. On the CPU (chunked_cross_entropy's ATen path) the
    // logits and their softmax, both in the compute dtype: 2 x e B per logit. On a GPU the
    // cross-entropy kernel writes softmax - onehot over the logits (e B per logit), or with
    // [train] lm_head = "fp8" beside them as e4m3 rows (e + 1 B per logit; the logits are freed
    // before the gradient's product).
    x.chunk = std::min<u64>(cfg.train.loss_chunk, std::max<u64>(x.keep, 1));
    const u64 per_logit = place.is_cpu() ? 2 * e : e + (cfg.train.lm_head == Matmul::FP8 ? 1 : 0);
    x.logits = x.chunk * m.v * per_logit;
    x.grads = dflash_params(d.target, nl, d.layer_ids.size()) * 4;
    x.grads_now = grads_in_forward ? x.grads : 0;

    if (cfg.train.recompute == Recompute::None) {
        // Backward of the last layer's MLP, where the backward peaks (later layers have freed
        // more activations than their gradients take): three [rows, I] gradients, one fp32 [H, I]
        // weight gradient and its cast; earlier micro-batches' gradients when the step has them.
        x.bwd = 3 * x.rows * m.i * e + 2 * m.h * m.i * 4;
        x.fwd_peak = x.grads_now + x.saved + x.ce_rows + x.logits;
        x.bwd_peak = x.grads_now + x.saved + x.keep * m.h * e + x.bwd;
        x.forward = x.fwd_peak >= x.bwd_peak;
        x.peak = x.forward ? DrafterPeak::LossChunk : DrafterPeak::LayerBackward;
        x.peak_bytes = std::max(x.fwd_peak, x.bwd_peak);
        return x;
    }

    // recompute = "layers": each layer is one RecomputeFunction (src/model/ops/recompute.cpp). Its
    // forward runs without grad and saves only its inputs: the block rows entering the layer
    // (rows x H), the fused context (shared) and the fp32 master weights (no new memory), so the
    // layers' bf16 weight casts are freed at once; fc's and the two norms' casts stay saved.
    x.recompute = true;
    const u64 row_bytes = x.rows * m.h * e;
    const u64 layer_p = drafter_layer_params(m);
    const u64 fc_casts = e < 4 ? (d.layer_ids.size() * m.h * m.h + 2 * m.h) * e : 0;
    const u64 layer_casts = e < 4 ? layer_p * e : 0;
    // (1) The loss chunk: every layer's input, the last layer's output (the final norm's input),
    //     the context, mask, RoPE; the CE rows and the logits chunk, as without recompute.
    const u64 ce = x.grads_now + fc_casts + nl * row_bytes + shared + x.ce_rows + x.logits;
    // (2) The last layer's forward without grad: its C++ locals live until it returns: h, y, m,
    //     the down projection and the sum (5H), q and attention out (2Q), k and v of the block
    //     rows (2K), gate/up/product (+ silu on the CPU: mlp_rows x I) per row; the context's k
    //     and v (2K per token); the k/v casts and the down projection's cast.
    const u64 nograd = x.rows * (5 * m.h + 2 * m.q + 2 * m.k + mlp_rows * m.i) * e + t * 2 * m.k * e +
                       (e < 4 ? (2 * m.k * m.h + m.h * m.i) * e : 0);
    const u64 fwd_layer = x.grads_now + fc_casts + nl * row_bytes + shared_layers + nograd;
    // (3) The backward of layer j: it runs the layer again under grad, so one layer's saved
    //     activations, its keys, its weight casts and its recomputed output exist, with the
    //     gradient flowing in (rows x H). Its MLP backward peaks while the SwiGLU's backward
    //     runs: the product is freed by down's backward, and d(product), d(gate) (d(silu) on the
    //     CPU), d(up) exist (+2 [rows, I] over the saved mlp_rows x I), with down's fp32 [H, I]
    //     weight gradient. Besides, the inputs of
    //     layers 0..j are still saved, and (one micro-batch per step) the layers after j have
    //     their fp32 gradients, d(context) accumulated over them: linear in j, so the worst is
    //     layer 0 or the last one.
    const u64 layer = per_layer + x.keys / std::max<u64>(nl, 1) + row_bytes;
    const u64 mlp_bwd = 2 * x.rows * m.i * e + m.h * m.i * 4;
    const u64 bwd_common = x.grads_now + fc_casts + layer_casts + shared_layers + layer + row_bytes + mlp_bwd;
    const u64 later_grads = grads_in_forward ? 0 : (nl - 1) * layer_p * 4;
    const u64 dctx = nl > 1 ? t * m.h * e : 0;
    const u64 first = bwd_common + row_bytes + later_grads + dctx;
    const u64 last = bwd_common + nl * row_bytes;
    x.fwd_peak = std::max(ce, fwd_layer);
    x.bwd_peak = std::max(first, last);
    x.forward = x.fwd_peak >= x.bwd_peak;
    x.peak_bytes = std::max(x.fwd_peak, x.bwd_peak);
    if (x.forward && ce >= fwd_layer) {
        x.peak = DrafterPeak::LossChunk;
        x.inputs = nl * row_bytes;
        x.shared = shared;
        x.flowing = x.ce_rows;
        x.casts = fc_casts;
        x.transient = x.logits;
    } else if (x.forward) {
        x.peak = DrafterPeak::RecomputeForward;
        x.inputs = nl * row_bytes;
        x.shared = shared_layers;
        x.casts = fc_casts;
        x.transient = nograd;
    } else {
        const bool at_first = nl > 1 && first >= last;  // one layer: the first is the last
        x.peak = at_first ? DrafterPeak::RecomputeFirstLayer : DrafterPeak::RecomputeLastLayer;
        x.inputs = (at_first ? 1 : nl) * row_bytes;
        x.layer = layer;
        x.shared = shared_layers;
        x.flowing = row_bytes + (at_first ? dctx : 0);
        x.casts = fc_casts + layer_casts;
        x.layer_grads = at_first ? later_grads : 0;
        x.transient = mlp_bwd;
    }
    return x;
}

std::string peak_phase(const DrafterBatch& x, std::uint64_t nl) {
    switch (x.peak) {
    case DrafterPeak::LossChunk: return "the forward's cross-entropy chunk";
    case DrafterPeak::LayerBackward: return "the backward of the last layer";
    case DrafterPeak::RecomputeForward: return "the last layer's forward without grad ([train] recompute = \"layers\")";
    case DrafterPeak::RecomputeFirstLayer:
        return fmt::format("the backward of layer 0, recomputed ([train] recompute = \"layers\"), with layers 1-{}'s "
                           "gradients",
                           nl - 1);
    case DrafterPeak::RecomputeLastLayer:
        return "the backward of the last layer, recomputed ([train] recompute = \"layers\")";
    }
    return {};
}

} // namespace

std::uint64_t dflash_batch_peak(const Config& cfg, const Derived& d, Place place, const MicroBatch& mb,
                                bool grads_in_forward) {
    return drafter_batch(cfg, d, place, mb, grads_in_forward).peak_bytes;
}

WorkerMemory dflash_drafter_memory(const Config& cfg, const Derived& d, const std::string& name, Place place,
                                   const MicroBatch& mb, bool grads_in_forward, std::uint64_t world) {
    const ModelShape& s = d.target;
    const Dims m(s);
    const bool gang = world > 1;
    grads_in_forward = grads_in_forward || gang;
    const DrafterBatch x = drafter_batch(cfg, d, place, mb, grads_in_forward);
    const u64 e = x.e, ring_e = dtype_bytes(cfg.ring.dtype);
    const u64 n_ctx = d.layer_ids.size(), nl = cfg.drafter.num_layers;
    const u64 p = dflash_params(s, nl, n_ctx);
    WorkerMemory w{name, place, peak_phase(x, nl), {}};

    w.parts.push_back({"embedding_and_lm_head", m.v * m.h * e * (s.tie_word_embeddings ? 1 : 2),
                       fmt::format("the target's {} x {} x {} B, frozen{}", num(m.v), m.h, e,
                                   s.tie_word_embeddings ? " (tied: one tensor)" : ": embedding + LM head")});
    if (cfg.train.lm_head == Matmul::FP8)
        w.parts.push_back({"fp8_lm_head", 2 * m.v * m.h + 4 * (m.v + m.h),
                           fmt::format("[train] lm_head = \"fp8\": the LM head twice in e4m3 (as is and transposed), {} x {} "
                                       "x 1 B each, + row scales (its quantised gradient rows fit the logits' bound)",
                                       num(m.v), m.h)});
    w.parts.push_back({"fp32_master_weights", p * 4, fmt::format("{} parameters x 4 B", num(p))});
    if (!x.recompute && cfg.train.matmul == Matmul::FP8) {
        // The casts of the rest: none where the compute dtype is fp32 (the CPU, which emulates the
        // FP8 products and keeps the same e4m3 copies).
        const u64 cast_e = e < 4 ? e : 0;
        const auto [layer_bytes, layer_params] = fp8_layer_saved(m, cast_e);
        w.parts.push_back({"bf16_weight_casts", (p - nl * layer_params) * cast_e + nl * layer_bytes,
                           fmt::format("[train] matmul = \"fp8\": fc and norms ({} parameters) x {} B, the forward's casts; "
                                       "the layers' linear weights as saved e4m3 copies, {} x {} (1 B per parameter, k and v "
                                       "twice, + row scales)",
                                       num(p - nl * layer_params), cast_e, nl, gib(layer_bytes))});
    } else if (!x.recompute)
        w.parts.push_back({"bf16_weight_casts", e < 4 ? p * e : 0,
                           e < 4 ? fmt::format("{} parameters x {} B: the forward's casts, saved for backward", num(p), e)
                                 : std::string("none: the CPU computes in fp32")});
    else
        w.parts.push_back(
            {"bf16_weight_casts", x.casts,
             e >= 4 ? std::string("none: the CPU computes in fp32")
             : x.peak == DrafterPeak::RecomputeFirstLayer || x.peak == DrafterPeak::RecomputeLastLayer
                 ? fmt::format("fc and norms ({} parameters) x {} B, saved; + the recomputed layer's {} parameters x "
                               "{} B (recompute frees the other layers' casts)",
                               num(n_ctx * m.h * m.h + 2 * m.h), e, num(drafter_layer_params(m)), e)
                 : fmt::format("fc and norms ({} parameters) x {} B, saved (recompute frees the layers' casts)",
                               num(n_ctx * m.h * m.h + 2 * m.h), e)});
    add_optimizer_parts(w, p, x.grads, gang, grads_in_forward, x.layer_grads,
                        fmt::format("layers 1-{}: {} x {} parameters x 4 B, accumulated before layer 0's backward "
                                    "(one micro-batch per optimizer step)",
                                    nl - 1, nl - 1, num(drafter_layer_params(m))));
    const std::string batch = fmt::format("worst micro-batch: {} samples, {} context tokens, {} blocks x {} = {} rows",
                                          mb.samples, num(mb.tokens), num(mb.blocks), cfg.drafter.block_size,
                                          num(x.rows));
    if (!x.recompute) {
        w.parts.push_back({"activations", x.saved + (x.forward ? x.ce_rows : x.keep * m.h * e),
                           fmt::format("{}; {} layers x {} B per row + attention keys {} + mask {}", batch, nl,
                                       num(x.row * e), gib(x.keys), gib(x.mask))});
    } else {
        std::string how = fmt::format("[train] recompute = \"layers\": {}; {} checkpointed layer input(s) (rows x {} x {} B) {}",
                                      batch, x.inputs / std::max<u64>(x.rows * m.h * e, 1), m.h, e, gib(x.inputs));
        if (x.layer)
            how += fmt::format(" + the recomputed layer's activations {} ({} B per row, its keys, its output)", gib(x.layer),
                               num(x.row * e));
        how += fmt::format(" + context, RoPE, mask {}{}", gib(x.shared), x.peak == DrafterPeak::LossChunk
                                                                            ? " + the final norm's input"
                                                                            : "");
        if (x.flowing)
            how += fmt::format(" + {} {}", x.peak == DrafterPeak::LossChunk ? "output and scored rows" : "gradients flowing back",
                               gib(x.flowing));
        // The no-grad forward's locals are activations too (5H + 2Q + 2K + 4I per row, the
        // context's k and v, the k/v/down casts).
        const u64 nograd = x.peak == DrafterPeak::RecomputeForward ? x.transient : 0;
        if (nograd) how += fmt::format(" + the last layer's no-grad forward {}", gib(nograd));
        w.parts.push_back({"activations_recompute_layers", x.inputs + x.layer + x.shared + x.flowing + nograd, how});
    }
    const bool chunk = x.peak == DrafterPeak::LossChunk;
    w.parts.push_back({"loss_chunk_logits", chunk ? x.logits : 0,
                       chunk ? fmt::format("{} positions x {} vocab x {} B: {}", num(x.chunk), num(m.v),
                                           x.logits / std::max<u64>(x.chunk * m.v, 1),
                                           place.is_cpu() ? "the logits and their softmax in the compute dtype"
                                           : cfg.train.lm_head == Matmul::FP8
                                               ? "the logits and their gradient as e4m3 rows (the cross-entropy kernel)"
                                               : "the logits, overwritten by their gradient (the cross-entropy kernel)")
                             : std::string(x.forward ? "freed before the layer's forward" : "freed before the backward peak")});
    std::string bwd_how = "below the forward's peak";
    u64 bwd_bytes = 0;
    if (x.peak == DrafterPeak::LayerBackward) {
        bwd_bytes = x.bwd;
        bwd_how = "3 x rows x intermediate gradients + one fp32 [H, I] weight gradient";
    } else if (x.recompute && !x.forward) {
        bwd_bytes = x.transient;
        bwd_how = "MLP backward: d(product), d(silu), d(up) (2 x rows x intermediate over the freed product) + down's "
                  "fp32 [H, I] weight gradient";
    }
    w.parts.push_back({"backward_transients", bwd_bytes, bwd_how});
    const u64 slots = cfg.drafter.inflight_slots * n_ctx * cfg.ring.slot_tokens * m.h * ring_e;
    w.parts.push_back({"inflight_slots", slots,
                       fmt::format("[drafter] inflight_slots = {} x {} layers x {} tokens x {} x {} B",
                                   cfg.drafter.inflight_slots, n_ctx, num(cfg.ring.slot_tokens), m.h, ring_e)});
    add_gang_parts(w, x.grads, p, world);
    add_overheads(w);
    return w;
}

namespace {

std::string dflash_workload_line(const Plan& p) {
    const Workload& w = p.workload;
    return fmt::format(
        "micro-batches of <= {} tokens ([train] micro_batch_tokens); the worst of epoch 0's {} slots: {} "
        "samples, {} tokens, {} blocks of {} (slot {}); {} micro-batch(es) per optimizer step at most; [train] "
        "recompute = \"{}\"",
        num(w.micro_batch_tokens), w.slots.size(), p.worst.samples, num(p.worst.tokens), num(p.worst.blocks),
        p.cfg.drafter.block_size, p.worst_slot, w.micro_batches_per_step, to_string(p.cfg.train.recompute));
}

void dflash_workload_json(const Plan& p, nlohmann::json& worst, nlohmann::json& workload) {
    worst["blocks"] = p.worst.blocks;
    worst["rows"] = p.worst.blocks * p.cfg.drafter.block_size;
    workload["recompute"] = to_string(p.cfg.train.recompute);
}

std::uint64_t params_of(const Config& cfg, const Derived& d) {
    return dflash_params(d.target, cfg.drafter.num_layers, d.layer_ids.size());
}

} // namespace

extern const DrafterPlan kDFlashPlan;
const DrafterPlan kDFlashPlan{"dflash", &params_of, &dflash_batch_peak, &dflash_drafter_memory, &dflash_workload_line,
                              &dflash_workload_json};

} // namespace hsring::plan
