// The memory arithmetic (see memory_model.hpp). Element counts follow what the code keeps
// alive; the comments name the code they count.
#include "plan/memory_model.hpp"

#include "hsring/ledger.hpp"
#include "hsring/ring.hpp"
#include "ring/layout.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace hsring::plan {
namespace {

using u64 = std::uint64_t;

// The dims every count below uses.
struct Dims {
    u64 h, q, k, i, v, d, hq, hkv, layers;
    explicit Dims(const ModelShape& s)
        : h(u64(s.hidden_size)), q(u64(s.num_heads * s.head_dim)), k(u64(s.num_kv_heads * s.head_dim)),
          i(u64(s.intermediate_size)), v(u64(s.vocab_size)), d(u64(s.head_dim)), hq(u64(s.num_heads)),
          hkv(u64(s.num_kv_heads)), layers(u64(s.num_layers)) {}
};

std::string gib(u64 b) { return format_bytes(b); }
std::string num(u64 n) { return format_count(n); }

u64 slack(u64 allocated) { return static_cast<u64>(std::llround(static_cast<double>(allocated) * kAllocatorSlack)); }

void add_overheads(WorkerMemory& w) {
    if (w.place.is_cpu()) return;
    const u64 a = w.allocated();
    w.parts.push_back({"cuda_context", kCudaContextBytes, "CUDA context, cuBLAS handles, loaded kernels (stated)", true});
    w.parts.push_back({"allocator_slack", slack(a),
                       fmt::format("{:.0f}% of the allocated peak: cached blocks not in use (stated)", kAllocatorSlack * 100),
                       true});
}

} // namespace

std::uint64_t WorkerMemory::allocated() const {
    u64 s = 0;
    for (const auto& p : parts)
        if (!p.overhead) s += p.bytes;
    return s;
}

std::uint64_t WorkerMemory::total() const {
    u64 s = 0;
    for (const auto& p : parts) s += p.bytes;
    return s;
}

const Part* WorkerMemory::part(const std::string& n) const {
    for (const auto& p : parts)
        if (p.name == n) return &p;
    return nullptr;
}

std::uint64_t HostMemory::total() const {
    u64 s = 0;
    for (const auto& p : parts) s += p.bytes;
    return s;
}

std::uint64_t target_params(const ModelShape& s) {
    const Dims m(s);
    // tensor_specs() in src/model/target.cpp: per layer q/k/v/o, gate/up/down, two norms (+ q/k
    // norms for Qwen3); embedding, final norm, LM head unless tied.
    const u64 layer = m.h * (m.q + 2 * m.k) + m.q * m.h + 3 * m.h * m.i + 2 * m.h + (s.qk_norm() ? 2 * m.d : 0);
    return m.v * m.h + m.layers * layer + m.h + (s.tie_word_embeddings ? 0 : m.v * m.h);
}

std::uint64_t drafter_params(const ModelShape& s, std::uint64_t layers, std::uint64_t context_layers) {
    const Dims m(s);
    // DFlashDrafterImpl (src/model/dflash_drafter.cpp): Qwen3 layers (always q/k norms), fc
    // [H, L*H], hidden_norm, norm.
    const u64 layer = m.h * (m.q + 2 * m.k) + m.q * m.h + 3 * m.h * m.i + 2 * m.h + 2 * m.d;
    return layers * layer + context_layers * m.h * m.h + 2 * m.h;
}

WorkerMemory target_memory(const Config& cfg, const Derived& d, const std::string& name, Place place,
                           std::uint64_t t) {
    const ModelShape& s = d.target;
    const Dims m(s);
    // CPU workers compute in fp32 (TorchTarget); GPU ones in [target] dtype.
    const u64 e = place.is_cpu() ? 4 : dtype_bytes(cfg.target.dtype);
    const u64 ring_e = dtype_bytes(cfg.ring.dtype);
    WorkerMemory w{name, place, "the forward's last computed layer, in its MLP", {}};

    const u64 params = target_params(s);
    int last = 0;
    for (int id : d.layer_ids) last = std::max(last, id);
    w.parts.push_back({"weights", params * e,
                       fmt::format("{} parameters x {} B: all {} layers are loaded, the forward stops after layer {}",
                                   num(params), e, m.layers, last)});

    // TargetModel::layer_forward, per token, the largest of three moments (elements):
    //   always alive: h (H) + fused qkv (Q + 2K)
    //   RoPE of q:    + q_norm output (Q, Qwen3) + rotated, x*cos, rotated*sin, result (4Q)
    //   in swiglu:    + q, k, v copy (Q + 2K) + attention out (Q) + mid, normed mid (2H)
    //                 + gate_up (2I) + silu (I) + product (I)
    //   down proj:    the same with silu gone (-I) + down, the sum (2H)
    const u64 base = m.h + m.q + 2 * m.k;
    const u64 rope = base + (s.qk_norm() ? m.q : 0) + 4 * m.q;
    const u64 mlp = base + 2 * m.q + 2 * m.k + 2 * m.h + 4 * m.i;
    const u64 down = base + 2 * m.q + 2 * m.k + 4 * m.h + 3 * m.i;
    const u64 per_token = std::max({rope, mlp, down});
    // + RoPE cos/sin tables, int64 tokens and positions, flash attention's fp32 log-sum-exp.
    const u64 small = 2 * m.d * e + 16 + 4 * m.hq;
    w.parts.push_back({"activations", t * (per_token * e + small),
                       fmt::format("{} tokens x ({} elements x {} B + {} B): residual, q/k/v, attention out, MLP "
                                   "intermediate of one layer (no logits)",
                                   num(t), num(per_token), e, small)});

    // TorchTarget::write keeps each captured layer referenced until its D2H copy ends (the end
    // of the forward): at the peak, every captured layer but the one being computed. A ring
    // dtype other than the compute dtype keeps converted copies of all of them. CPU: memcpy at
    // once, nothing kept.
    const u64 n = d.layer_ids.size();
    u64 captured = 0;
    std::string how = "none: the CPU copies each layer into the slot at once";
    if (!place.is_cpu()) {
        const u64 kept = ring_e == e ? n - 1 : n;
        captured = kept * t * m.h * ring_e;
        how = fmt::format("{} of {} captured layers x {} tokens x {} x {} B, referenced until the D2H copies end", kept,
                          n, num(t), m.h, ring_e);
    }
    w.parts.push_back({"captured_hidden_states", captured, how});
    add_overheads(w);
    return w;
}

namespace {

// What one micro-batch costs a drafter (DFlashDrafterImpl::forward, dflash_loss, chunked CE).
struct DrafterBatch {
    u64 e, rows, row, keys, mask, saved, keep, ce_rows, chunk, logits, bwd, grads, fwd_peak, bwd_peak;
    bool forward;
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
    // (K); MLP input and its norm (2H); gate, silu, up, product (4I).
    x.row = 4 * m.h + 4 * m.q + m.k + 4 * m.i;
    // Per layer besides: each group's concatenated keys and values [context prefix | block rows]
    // (2K per key), the context's k projection before k_norm (K per token), fp32 RMSNorm rstd
    // and attention log-sum-exp (2 + Hq + Hkv + Hq per row).
    x.keys = nl * mb.keys * 2 * m.k * e;
    const u64 per_layer = x.rows * x.row * e + t * m.k * e + x.rows * (2 + 2 * m.hq + m.hkv) * 4;
    // Shared by the layers: the fused context and its pre-norm (2H per token), the final norm's
    // input (H per row), RoPE tables, int64/fp32 block tensors, the additive attention mask
    // repeated Hq/Hkv times (plan_block_attention).
    x.mask = (m.hq / m.hkv) * mb.mask * e;
    const u64 shared = 2 * t * m.h * e + x.rows * m.h * e + 2 * m.d * e * (t + x.rows) + x.rows * 29 + t * 8 + x.mask;
    x.saved = nl * per_layer + x.keys + shared;
    // Rows the cross-entropy scores: never slot 0 (at most blocks x (B-1)).
    x.keep = mb.blocks * (b - 1);
    // While the loss runs: the drafter output, its scored rows and their gradient (CE saves it).
    x.ce_rows = x.rows * m.h * e + 2 * x.keep * m.h * e;
    // One chunk of logits in fp32 (chunked_cross_entropy) and, inside at::logsumexp, the fp32
    // (logits - max) it exponentiates: 8 B per logit. (The compute-dtype twins before and after,
    // 4 + 2 B, stay below that.)
    x.chunk = std::min<u64>(cfg.train.loss_chunk, std::max<u64>(x.keep, 1));
    x.logits = x.chunk * m.v * 8;
    // Backward of the last layer's MLP, where the backward peaks (later layers have freed more
    // activations than their gradients take): three [rows, I] gradients, one fp32 [H, I] weight
    // gradient and its cast; earlier micro-batches' gradients when the step has them.
    x.bwd = 3 * x.rows * m.i * e + 2 * m.h * m.i * 4;
    x.grads = drafter_params(d.target, nl, d.layer_ids.size()) * 4;
    const u64 grads_now = grads_in_forward ? x.grads : 0;
    x.fwd_peak = grads_now + x.saved + x.ce_rows + x.logits;
    x.bwd_peak = grads_now + x.saved + x.keep * m.h * e + x.bwd;
    x.forward = x.fwd_peak >= x.bwd_peak;
    return x;
}

} // namespace

std::uint64_t drafter_batch_peak(const Config& cfg, const Derived& d, Place place, const MicroBatch& mb,
                                 bool grads_in_forward) {
    const DrafterBatch x = drafter_batch(cfg, d, place, mb, grads_in_forward);
    return std::max(x.fwd_peak, x.bwd_peak);
}

WorkerMemory drafter_memory(const Config& cfg, const Derived& d, const std::string& name, Place place,
                            const MicroBatch& mb, bool grads_in_forward, std::size_t n_drafters) {
    const ModelShape& s = d.target;
    const Dims m(s);
    const DrafterBatch x = drafter_batch(cfg, d, place, mb, grads_in_forward);
    const u64 e = x.e, ring_e = dtype_bytes(cfg.ring.dtype);
    const u64 n_ctx = d.layer_ids.size(), nl = cfg.drafter.num_layers;
    const u64 p = drafter_params(s, nl, n_ctx);
    WorkerMemory w{name, place, x.forward ? "the forward's cross-entropy chunk" : "the backward of the last layer", {}};

    w.parts.push_back({"embedding_and_lm_head", m.v * m.h * e * (s.tie_word_embeddings ? 1 : 2),
                       fmt::format("the target's {} x {} x {} B, frozen{}", num(m.v), m.h, e,
                                   s.tie_word_embeddings ? " (tied: one tensor)" : ": embedding + LM head")});
    w.parts.push_back({"fp32_master_weights", p * 4, fmt::format("{} parameters x 4 B", num(p))});
    w.parts.push_back({"bf16_weight_casts", e < 4 ? p * e : 0,
                       e < 4 ? fmt::format("{} parameters x {} B: the forward's casts, saved for backward", num(p), e)
                             : std::string("none: the CPU computes in fp32")});
    w.parts.push_back({"adamw_state", 2 * p * 4, fmt::format("exp_avg + exp_avg_sq: 2 x {} parameters x 4 B", num(p))});
    w.parts.push_back({"fp32_gradients", grads_in_forward ? x.grads : 0,
                       grads_in_forward ? fmt::format("{} parameters x 4 B (a step holds several micro-batches)", num(p))
                                        : std::string("none at the peak: one micro-batch per optimizer step (zero_grad "
                                                      "frees them)")});
    w.parts.push_back({"activations", x.saved + (x.forward ? x.ce_rows : x.keep * m.h * e),
                       fmt::format("worst micro-batch: {} samples, {} context tokens, {} blocks x {} = {} rows; "
                                   "{} layers x {} B per row + attention keys {} + mask {}",
                                   mb.samples, num(mb.tokens), num(mb.blocks), cfg.drafter.block_size, num(x.rows), nl,
                                   num(x.row * e), gib(x.keys), gib(x.mask))});
    w.parts.push_back({"loss_chunk_logits", x.forward ? x.logits : 0,
                       x.forward ? fmt::format("{} positions x {} vocab x 8 B: fp32 logits + logsumexp's fp32 "
                                               "(logits - max)", num(x.chunk), num(m.v))
                                 : std::string("freed before the backward peak")});
    w.parts.push_back({"backward_transients", x.forward ? 0 : x.bwd,
                       x.forward ? std::string("below the forward's peak")
                                 : std::string("3 x rows x intermediate gradients + one fp32 [H, I] weight gradient")});
    const u64 slots = cfg.drafter.inflight_slots * n_ctx * cfg.ring.slot_tokens * m.h * ring_e;
    w.parts.push_back({"inflight_slots", slots,
                       fmt::format("[drafter] inflight_slots = {} x {} layers x {} tokens x {} x {} B",
                                   cfg.drafter.inflight_slots, n_ctx, num(cfg.ring.slot_tokens), m.h, ring_e)});
    if (n_drafters > 1)
        w.parts.push_back({"allreduce_buffers", p * 2 + kNcclBytes,
                           fmt::format("{} data-parallel drafters (assumed): bf16 gradient copy {} + NCCL {}",
                                       n_drafters, gib(p * 2), gib(kNcclBytes))});
    add_overheads(w);
    return w;
}

HostMemory host_memory(const Config& cfg, const Derived& d, const SampleSource& source,
                       const std::vector<WorkerMemory>& cpu_workers) {
    HostMemory h;
    const RingGeometry g = RingGeometry::from(cfg, d);
    const u64 ring = ring_detail::Offsets::of(g).total;
    h.parts.push_back({"ring", ring,
                       fmt::format("{} slots x {} + header and slot metadata", d.slots, gib(d.slot_stride))});
    const LedgerInfo info{0, source.samples(), cfg.data.epochs, cfg.run.seed, cfg.data.shuffle};
    h.parts.push_back({"ledger", Ledger::region_bytes(info),
                       source.is_synthetic() ? std::string("header only: no data set to count (--sample-tokens)")
                                             : fmt::format("{} samples x {} epochs x 8 B + header", num(info.samples),
                                                           info.epochs)});
    const u64 n_targets = cfg.topology.targets.size();
    const u64 copy = source.loaded_bytes(d);
    h.parts.push_back({"data_set", (n_targets + 1) * copy,
                       source.is_synthetic() ? std::string("no data set (--sample-tokens)")
                                             : fmt::format("{} copies x {}: the supervisor's and one per target process",
                                                           n_targets + 1, gib(copy))});
    u64 gpu_workers = 0, cpu_workers_n = 0;
    for (const auto& p : cfg.topology.targets) (p.is_cpu() ? cpu_workers_n : gpu_workers) += 1;
    for (const auto& p : cfg.topology.drafters) (p.is_cpu() ? cpu_workers_n : gpu_workers) += 1;
    h.parts.push_back({"worker_processes", gpu_workers * kWorkerHostBytes + cpu_workers_n * kCpuWorkerHostBytes,
                       fmt::format("{} GPU worker processes x {} (LibTorch, CUDA runtime) + {} CPU ones x {} (stated)",
                                   gpu_workers, gib(kWorkerHostBytes), cpu_workers_n, gib(kCpuWorkerHostBytes))});
    const u64 p = drafter_params(d.target, cfg.drafter.num_layers, d.layer_ids.size());
    const u64 n_drafters = cfg.topology.drafters.size();
    h.parts.push_back({"checkpoint_staging", n_drafters * 2 * p * 4,
                       fmt::format("{} drafter(s) x AdamW state {} copied to host while a checkpoint is written",
                                   n_drafters, gib(2 * p * 4))});
    for (const auto& w : cpu_workers)
        h.parts.push_back({w.name + " (cpu)", w.allocated(), "the worker's model memory, computed as on a GPU in fp32"});
    if (cfg.ring.huge_pages != HugePages::Off) h.huge_pages = (ring + kHugePage - 1) / kHugePage;
    if (gpu_workers > 0) h.pinned_bytes = ring;
    return h;
}

} // namespace hsring::plan
