// The EAGLE-3 drafter's memory arithmetic (see eagle3_memory.hpp). Element counts follow what the
// code keeps alive; the comments name the code they count.
//
// One micro-batch of S samples and T tokens gives R = T - S rows. The drafter runs fc once, then
// ttt_steps (K) steps of its one layer over all R rows (forward_steps), then the loss of each step
// (eagle3_loss): everything every step saves stays alive until the backward, which runs every
// step's loss before the layer's steps (autograd's order: the loss nodes are the newest).
#include "plan/eagle3_memory.hpp"

#include "plan/drafter_plan.hpp"
#include "plan/plan.hpp"

#include "hsring/units.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace hsring::plan {
namespace {

using u64 = std::uint64_t;

struct Dims {
    u64 h, q, kv, i, v, vd, d, hq, hkv;
    Dims(const ModelShape& s, const Config& cfg)
        : h(u64(s.hidden_size)), q(u64(s.num_heads * s.head_dim)), kv(u64(s.num_kv_heads * s.head_dim)),
          i(u64(s.intermediate_size)), v(u64(s.vocab_size)),
          vd(cfg.drafter.draft_vocab > 0 ? u64(cfg.drafter.draft_vocab) : u64(s.vocab_size)), d(u64(s.head_dim)),
          hq(u64(s.num_heads)), hkv(u64(s.num_kv_heads)) {}
};

// The layer's linear weights: q/k/v over the [2H] input, o, gate/up/down.
u64 layer_linear(const Dims& m) { return 2 * m.h * (m.q + 2 * m.kv) + m.q * m.h + 3 * m.h * m.i; }

enum class Peak { Loss, MlpBackward, AttentionBackward };

// What one micro-batch costs the drafter, and where its peak is.
struct Batch {
    u64 e = 0, rows = 0, steps = 0;
    bool eager = false;  // the CPU's eager attention ([heads, R, R + k] probabilities per step)
    u64 step_row = 0;    // bytes saved per row and step
    u64 saved = 0;       // every step's saved tensors, fc's output and every step's output, the fused
                         // rows, the row indices
    u64 attention = 0;   // CPU: probabilities, masks, repeated keys/values; GPU: log-sum-exp
    u64 logits = 0;      // the loss's tensors at its last step
    u64 flowing = 0;     // the gradient flowing back into the last step (backward peaks)
    u64 transient = 0;   // the backward peak op's own tensors
    u64 grads = 0, grads_now = 0, early_grads = 0;
    Peak peak = Peak::Loss;
    u64 peak_bytes = 0;
};

Batch batch(const Config& cfg, const Derived& d, Place place, const MicroBatch& mb, bool grads_in_forward) {
    const Dims m(d.target, cfg);
    Batch x;
    // bf16 compute on CUDA, fp32 on CPU (default_compute_dtype).
    x.e = place.is_cpu() ? 4 : 2;
    x.eager = place.is_cpu();
    const u64 e = x.e, r = eagle3_rows(mb), k = cfg.drafter.ttt_steps, ring_e = dtype_bytes(cfg.ring.dtype);
    x.rows = r;
    x.steps = k;
    // Saved per step and row (forward_steps, and logits() in the loss): the embedded token (the
    // input norm's input, H), the layer's [2H] input (q/k/v's), q after RoPE (Q), k and v (2K),
    // the attention output (o_proj's input, Q), the residual after attention (the post-attention
    // norm's input, H) and its norm (the MLP's input, H), gate, up and their product (3I on a GPU,
    // where silu(gate) * up is one kernel, model/ops/fused_swiglu.cpp; + silu(gate) on the CPU), the
    // final norm's output (the LM head's input, H), RoPE cos and sin (2 x head_dim); in fp32 the 4
    // norms' rstd (16 B).
    const u64 mlp_rows = place.is_cpu() ? 4 : 3;
    x.step_row = (6 * m.h + 2 * m.q + 2 * m.kv + mlp_rows * m.i + 2 * m.d) * e + 16;
    // Besides: fc's output g and every step's output (the next step's hidden; the loss keeps them
    // all), (K + 1) x H; the fused layers' rows gathered from the slot ([3, R, H] in the ring
    // dtype, eagle3_rows) and their compute-dtype copy where that differs (fc's saved input); int64
    // positions, source rows, sequences, last positions (32 B) and per step the tokens, target
    // positions (int64) and loss mask (fp32) (20 B).
    x.saved = k * r * x.step_row + (k + 1) * r * m.h * e + 3 * r * m.h * (ring_e + (e != ring_e ? e : 0)) +
              r * (32 + 20 * k);
    if (x.eager) {
        // ttt_attention (eager): per step s the softmax's probabilities [Hq, R, R + s] in fp32 (the
        // scores are freed once it ran), the masked_fill's negated mask [R, R] (bool), and with
        // grouped heads (Hq > Hkv) the repeated keys and values of step 0 and of each step 1..s
        // (2Q per row each); besides, the batch's same-sequence causal mask [R, R] (bool).
        u64 probs = 0;
        for (u64 s = 0; s < k; ++s) probs += 4 * m.hq * r * (r + s);
        const u64 repeats = m.hq != m.hkv ? r * m.q * e * k * (k + 1) : 0;
        x.attention = probs + (k + 1) * r * r + repeats;
    } else {
        // The flash path: no score matrix; a log-sum-exp per row and head (fp32) per step.
        x.attention = k * r * m.hq * 4;
    }
    // The loss per step (eagle3_loss): the log-softmax of the logits and the target distribution,
    // [R, Vd] in fp32, saved for backward (8 B); while the last step's KL runs besides: the
    // target's log-probabilities (fp32), the logits (e B), p log p, p log q and their difference
    // (fp32): 16 + e B. The target's log-probabilities at every packed position, [T, Vd] fp32,
    // formed once before the steps, live through all of them.
    x.logits = r * m.vd * (8 * k + 16 + e) + mb.tokens * m.vd * 4;
    x.grads = eagle3_params(d.target) * 4;
    x.grads_now = grads_in_forward ? x.grads : 0;

    const u64 kept = x.grads_now + x.saved + x.attention;
    const u64 loss = kept + x.logits;
    // The backward of the last step's MLP (the loss's tensors are freed by then): the gradient
    // flowing in (R x H), d(product), d(gate), d(up) (3 x R x I) and down's fp32 [H, I] weight
    // gradient with its cast.
    const u64 flow = r * m.h * e;
    const u64 mlp = 3 * r * m.i * e + 2 * m.h * m.i * 4;
    const u64 mlp_bwd = kept + flow + mlp;
    // The CPU: the backward of the last step's attention: d(probabilities) and d(scores)
    // [Hq, R, R + K - 1] in fp32, with (one micro-batch per step) the gradients of what comes after
    // it already there: o_proj, the MLP, the post-attention and final norms.
    const u64 early = grads_in_forward ? 0 : (m.q * m.h + 3 * m.h * m.i + 2 * m.h) * 4;
    const u64 attn = x.eager ? 2 * 4 * m.hq * r * (r + std::max<u64>(k, 1) - 1) : 0;
    const u64 attn_bwd = x.eager ? kept + early + flow + attn : 0;
    x.peak_bytes = std::max({loss, mlp_bwd, attn_bwd});
    if (x.peak_bytes == loss) {
        x.peak = Peak::Loss;
    } else if (x.peak_bytes == mlp_bwd) {
        x.peak = Peak::MlpBackward;
        x.flowing = flow;
        x.transient = mlp;
    } else {
        x.peak = Peak::AttentionBackward;
        x.flowing = flow;
        x.transient = attn;
        x.early_grads = early;
    }
    return x;
}

std::string peak_phase(const Batch& x) {
    switch (x.peak) {
    case Peak::Loss: return "the forward's loss of the last training-time-test step";
    case Peak::MlpBackward: return "the backward of the last training-time-test step's MLP";
    case Peak::AttentionBackward: return "the backward of the last training-time-test step's attention (eager, CPU)";
    }
    return {};
}

} // namespace

std::uint64_t eagle3_params(const ModelShape& s) {
    // Eagle3DrafterImpl (src/model/drafter/eagle3/drafter.cpp): fc [H, 3H], the midlayer (q/k/v
    // [., 2H], o [H, Q], gate/up/down, input_layernorm, hidden_norm, post_attention_layernorm), norm.
    const u64 h = u64(s.hidden_size), q = u64(s.num_heads * s.head_dim), kv = u64(s.num_kv_heads * s.head_dim),
              i = u64(s.intermediate_size);
    return 3 * h * h + 2 * h * (q + 2 * kv) + q * h + 3 * h * i + 4 * h;
}

std::uint64_t eagle3_rows(const MicroBatch& mb) { return mb.tokens - std::min(mb.tokens, mb.samples); }

std::uint64_t eagle3_batch_peak(const Config& cfg, const Derived& d, Place place, const MicroBatch& mb,
                                bool grads_in_forward) {
    return batch(cfg, d, place, mb, grads_in_forward).peak_bytes;
}

WorkerMemory eagle3_drafter_memory(const Config& cfg, const Derived& d, const std::string& name, Place place,
                                   const MicroBatch& mb, bool grads_in_forward, std::uint64_t world) {
    const ModelShape& s = d.target;
    const Dims m(s, cfg);
    const bool gang = world > 1;
    grads_in_forward = grads_in_forward || gang;
    const Batch x = batch(cfg, d, place, mb, grads_in_forward);
    const u64 e = x.e, k = x.steps, r = x.rows, ring_e = dtype_bytes(cfg.ring.dtype);
    const u64 p = eagle3_params(s);
    WorkerMemory w{name, place, peak_phase(x), {}};

    // The worker's TargetHead (load_target_head): embedding and LM head in the compute dtype; the
    // drafter copies its draft vocabulary's LM head rows (Eagle3DrafterImpl::set_vocab).
    w.parts.push_back({"embedding_and_lm_head", m.v * m.h * e * (s.tie_word_embeddings ? 1 : 2),
                       fmt::format("the target's {} x {} x {} B, frozen{}", num(m.v), m.h, e,
                                   s.tie_word_embeddings ? " (tied: one tensor)"
                                                         : ": embedding + LM head (the worker's target head)")});
    w.parts.push_back({"draft_lm_head", m.vd * m.h * 4 + m.vd * 8 + m.v,
                       fmt::format("the draft vocabulary's LM head rows, {} x {} x 4 B (fp32, frozen), + d2t (int64) "
                                   "and t2d (bool)", num(m.vd), m.h)});
    w.parts.push_back({"fp32_master_weights", p * 4,
                       fmt::format("{} parameters x 4 B: fc [{}, 3 x {}], one Llama layer over a [2 x {}] input, 4 norms",
                                   num(p), m.h, m.h, m.h)});
    // forward_steps casts the layer's weights and norms once for all steps, the loss the draft LM
    // head rows once (eagle3/drafter.cpp, loss.cpp); the final norm is cast at each step's logits.
    const u64 once = 3 * m.h * m.h + layer_linear(m) + 3 * m.h + m.vd * m.h;
    w.parts.push_back({"bf16_weight_casts", e < 4 ? (once + k * m.h) * e : 0,
                       e < 4 ? fmt::format("fc, the layer, its norms and the draft LM head rows ({} parameters) once "
                                           "+ the final norm ({}) x {} steps, x {} B: the forward's casts, saved for "
                                           "backward", num(once), num(m.h), k, e)
                             : std::string("none: the CPU computes in fp32")});
    add_optimizer_parts(w, p, x.grads, gang, grads_in_forward, x.early_grads,
                        fmt::format("o_proj, the MLP, the post-attention and final norms: {} parameters x 4 B, "
                                    "accumulated before the last step's attention backward (one micro-batch per "
                                    "optimizer step)", num(x.early_grads / 4)));
    w.parts.push_back(
        {"activations", x.saved + x.flowing,
         fmt::format("worst micro-batch: {} samples, {} tokens = {} rows x {} training-time-test steps; {} B per row "
                     "and step (the [2 x {}] input, q/k/v/o, the MLP's gate/up/act, norms, RoPE) + fc's and every "
                     "step's output, the fused rows, row indices{}",
                     mb.samples, num(mb.tokens), num(r), k, num(x.step_row), m.h,
                     x.flowing ? fmt::format(" + the gradient flowing back {}", gib(x.flowing)) : std::string())});
    w.parts.push_back(
        {"attention", x.attention,
         x.eager ? fmt::format("eager (CPU, fp32): per step the probabilities [{} heads, {} rows, {} + step] x 4 B, the "
                               "negated mask [R, R]{}; the same-sequence causal mask [R, R]",
                               m.hq, num(r), num(r),
                               m.hq != m.hkv ? ", the repeated keys and values (grouped heads)" : "")
                 : fmt::format("flash (GPU): no [heads, R, R] scores; a log-sum-exp per row and head, fp32, x {} steps",
                               k)});
    const bool loss = x.peak == Peak::Loss;
    w.parts.push_back({"ttt_logits", loss ? x.logits : 0,
                       loss ? fmt::format("{} rows x {} draft vocabulary: per step the log-softmax and the target "
                                          "distribution in fp32 (8 B) x {} steps, + the last step's logits ({} B), "
                                          "target log-probabilities and KL terms (16 B); + the target's "
                                          "log-probabilities at all {} tokens (fp32, formed once)",
                                          num(r), num(m.vd), k, e, num(mb.tokens))
                            : std::string("freed before the backward peak")});
    w.parts.push_back({"backward_transients", x.transient,
                       x.peak == Peak::MlpBackward
                           ? std::string("3 x rows x intermediate gradients + down's fp32 [H, I] weight gradient")
                       : x.peak == Peak::AttentionBackward
                           ? fmt::format("d(probabilities) and d(scores), [{} heads, R, R + {}] x 4 B", m.hq, k - 1)
                           : std::string("below the forward's peak")});
    const u64 n_ctx = d.layer_ids.size();
    const u64 slots = cfg.drafter.inflight_slots * n_ctx * cfg.ring.slot_tokens * m.h * ring_e;
    w.parts.push_back({"inflight_slots", slots,
                       fmt::format("[drafter] inflight_slots = {} x {} captured layers (3 fused + the last) x {} tokens x "
                                   "{} x {} B",
                                   cfg.drafter.inflight_slots, n_ctx, num(cfg.ring.slot_tokens), m.h, ring_e)});
    add_gang_parts(w, x.grads, p, world);
    add_overheads(w);
    return w;
}

namespace {

// [drafter] draft_vocab as trained: 0 = the target's vocabulary.
std::uint64_t draft_vocab(const Plan& p) {
    return p.cfg.drafter.draft_vocab > 0 ? static_cast<std::uint64_t>(p.cfg.drafter.draft_vocab)
                                         : static_cast<std::uint64_t>(p.derived.target.vocab_size);
}

std::string eagle3_workload_line(const Plan& p) {
    const Workload& w = p.workload;
    return fmt::format(
        "EAGLE-3: micro-batches of <= {} tokens ([train] micro_batch_tokens); the worst of epoch 0's {} "
        "slots: {} samples, {} tokens = {} rows x {} training-time-test steps, draft vocabulary {} (slot {}); {} "
        "micro-batch(es) per optimizer step at most",
        num(w.micro_batch_tokens), w.slots.size(), p.worst.samples, num(p.worst.tokens), num(eagle3_rows(p.worst)),
        p.cfg.drafter.ttt_steps, num(draft_vocab(p)), p.worst_slot, w.micro_batches_per_step);
}

void eagle3_workload_json(const Plan& p, nlohmann::json& worst, nlohmann::json& workload) {
    worst["rows"] = eagle3_rows(p.worst);
    workload["ttt_steps"] = p.cfg.drafter.ttt_steps;
    workload["draft_vocab"] = draft_vocab(p);
}

std::uint64_t params_of(const Config&, const Derived& d) { return eagle3_params(d.target); }

} // namespace

extern const DrafterPlan kEagle3Plan;
const DrafterPlan kEagle3Plan{"eagle3", &params_of, &eagle3_batch_peak, &eagle3_drafter_memory, &eagle3_workload_line,
                              &eagle3_workload_json};

} // namespace hsring::plan
