// The memory arithmetic (see memory_model.hpp). Element counts follow what the code keeps
// alive; the comments name the code they count.
#include "plan/memory_model.hpp"

#include "hsring/error.hpp"
#include "hsring/ledger.hpp"
#include "plan/drafter_plan.hpp"
#include "hsring/ring.hpp"
#include "ring/layout.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace hsring::plan {
namespace {

using u64 = std::uint64_t;
using Dims = ShapeDims;

} // namespace

std::uint64_t HostMemory::total() const {
    u64 s = 0;
    for (const auto& p : parts) s += p.bytes;
    return s;
}

std::uint64_t target_params(const ModelShape& s) {
    const Dims m(s);
    // tensor_specs() in src/model/target/target.cpp: per layer q/k/v/o, two norms (+ q/k norms for
    // Qwen3), the MLP: gate/up/down, or on a sparse layer (Qwen3-MoE, gpt-oss) the router [E, H]
    // and every expert's gate/up/down (all are loaded, whatever a token uses); gpt-oss adds
    // q/k/v/o, router and expert biases and one sink per head; embedding, final norm, LM head
    // unless tied.
    const bool oss = s.arch == "gpt_oss";
    const u64 attention = m.h * (m.q + 2 * m.k) + m.q * m.h + 2 * m.h + (s.qk_norm() ? 2 * m.d : 0) +
                          (s.attention_bias ? m.q + 2 * m.k + m.h : 0) + (s.attention_sinks() ? m.hq : 0);
    const u64 sparse = u64(s.num_moe_layers());
    const u64 experts = u64(s.num_experts), moe_i = u64(s.moe_intermediate_size);
    const u64 expert_biases = oss ? experts * (2 * moe_i + m.h) + experts : 0;
    const u64 mlps =
        (m.layers - sparse) * 3 * m.h * m.i + sparse * (experts * 3 * m.h * moe_i + experts * m.h + expert_biases);
    return m.v * m.h + m.layers * attention + mlps + m.h + (s.tie_word_embeddings ? 0 : m.v * m.h);
}

std::uint64_t drafter_type_params(const Config& cfg, const Derived& d) { return drafter_plan(cfg.drafter.type).params(cfg, d); }

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
    // [target] weights = "fp8": the layers' linear weights at 1 B + one fp32 scale per output row
    // (fp8_weights.hpp; the CPU keeps them so too and emulates the products); experts,
    // embeddings, norms and the LM head stay at e.
    const bool fp8 = cfg.target.weights == TargetWeights::FP8;
    u64 fp8_params = 0, fp8_rows = 0;
    for (std::int64_t i = 0; fp8 && i < s.num_layers; ++i) {
        fp8_params += m.h * (m.q + 2 * m.k) + m.q * m.h;
        fp8_rows += m.q + 2 * m.k + m.h;
        if (!s.is_moe_layer(i)) {
            fp8_params += 3 * m.h * m.i;
            fp8_rows += 2 * m.i + m.h;
        }
    }
    const std::string fp8_part = fp8 ? fmt::format(" + {} linear-layer parameters in FP8 x 1 B + {} row scales x 4 B",
                                                   num(fp8_params), num(fp8_rows))
                                     : std::string();
    w.parts.push_back({"weights", (params - fp8_params) * e + fp8_params + 4 * fp8_rows,
                       fmt::format("{} parameters x {} B{}: all {} layers{} are loaded, the forward stops after layer {}",
                                   num(params - fp8_params), e, fp8_part, m.layers,
                                   s.num_moe_layers() > 0 ? " and all experts" : "", last)});

    // TargetModel::layer_forward, per token, the largest of three moments (elements):
    //   always alive: h (H) + fused qkv (Q + 2K)
    //   RoPE of q:    + q_norm output (Q, Qwen3) + rotated, x*cos, rotated*sin, result (4Q)
    //   in swiglu:    + q, k, v copy (Q + 2K) + attention out (Q) + mid, normed mid (2H)
    //                 + gate_up (2I) + silu (I) + product (I)
    //   down proj:    the same with silu gone (-I) + down, the sum (2H)
    const u64 base = m.h + m.q + 2 * m.k;
    const u64 rope = base + (s.qk_norm() ? m.q : 0) + 4 * m.q;
    const bool dense_layers = s.num_moe_layers() < s.num_layers;
    const u64 mlp = dense_layers ? base + 2 * m.q + 2 * m.k + 2 * m.h + 4 * m.i : 0;
    const u64 down = dense_layers ? base + 2 * m.q + 2 * m.k + 4 * m.h + 3 * m.i : 0;
    //   a sparse layer (moe_mlp.cpp / gpt_oss_mlp.cpp on grouped GEMMs, expert_dispatch.cpp):
    //                 + q, k, v, attention out (2Q + 2K), mid, normed mid and the output summed
    //                 into (3H), router logits (E), the routing weights (2k); per routed pair
    //                 (k per token, all experts' rows at once) the largest of: gathered rows +
    //                 gate_up (H + 2I), the activation (gate_up + its temporaries: 4I, gpt-oss's
    //                 clamped SwiGLU 6I), down + its input (H + I, + H for gpt-oss's bias rows),
    //                 the gather back to token order (2H)
    //                 + bytes: fp32 probabilities (4E) and top-k weights (4k), int64 expert ids,
    //                 their sorted copy and order, the pair order and tokens (48k)
    const u64 moe_k = u64(s.num_experts_per_tok), moe_i = u64(s.moe_intermediate_size);
    const bool sparse_layers = s.num_moe_layers() > 0;
    const bool oss = s.arch == "gpt_oss";
    const u64 pair = std::max({m.h + 2 * moe_i, (oss ? 6 : 4) * moe_i, moe_i + (oss ? 2 : 1) * m.h, 2 * m.h});
    const u64 moe =
        sparse_layers ? base + 2 * m.q + 2 * m.k + 3 * m.h + u64(s.num_experts) + 2 * moe_k + moe_k * pair : 0;
    const u64 moe_bytes = sparse_layers ? 4 * u64(s.num_experts) + 4 * moe_k + 48 * moe_k : 0;
    const u64 per_token = std::max({rope, mlp, down, moe});
    // + RoPE cos/sin tables, int64 tokens and positions, flash attention's fp32 log-sum-exp.
    // FP8: + a linear input quantised (the widest, the MLP's I B) and its fp32 row scale.
    const u64 small = 2 * m.d * e + 16 + 4 * m.hq + (moe == per_token ? moe_bytes : 0) + (fp8 ? m.i + 4 : 0);
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
    if (!place.is_cpu() && cfg.transport.kind != TransportKind::Host) {
        // src/transport/peer_writer.cpp: the pool of exported buffers, one slot payload each.
        const u64 payload = n * cfg.ring.slot_tokens * m.h * ring_e;
        w.parts.push_back({"peer_buffers", cfg.transport.peer_buffers * payload,
                           fmt::format("[transport] peer_buffers = {} x one slot payload ({} layers x {} tokens x {} x {} "
                                       "B) exported to the drafters", cfg.transport.peer_buffers, n,
                                       num(cfg.ring.slot_tokens), m.h, ring_e)});
    }
    add_overheads(w);
    return w;
}

std::uint64_t drafter_batch_peak(const Config& cfg, const Derived& d, Place place, const MicroBatch& mb,
                                 bool grads_in_forward) {
    return drafter_plan(cfg.drafter.type).batch_peak(cfg, d, place, mb, grads_in_forward);
}

std::uint64_t gang_world(const Config& cfg) {
    return static_cast<std::uint64_t>(cfg.distributed.nnodes) * cfg.topology.drafters.size();
}

WorkerMemory drafter_memory(const Config& cfg, const Derived& d, const std::string& name, Place place,
                            const MicroBatch& mb, bool grads_in_forward, std::uint64_t world) {
    return drafter_plan(cfg.drafter.type).memory(cfg, d, name, place, mb, grads_in_forward, world);
}

HostMemory host_memory(const Config& cfg, const Derived& d, const SampleSource& source,
                       const std::vector<WorkerMemory>& cpu_workers) {
    HostMemory h;
    const RingGeometry& g = d.ring;
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
    const u64 p = drafter_type_params(cfg, d);
    // The master drafter (global rank 0: on machine 0 only) copies fp32 weights + both AdamW
    // moments to host memory at each checkpoint; with checkpoint_background (default) into pinned
    // buffers it keeps for the whole run (src/worker/torch/torch_drafter.cpp snapshot()).
    const bool master_here = cfg.distributed.node_rank == 0 && !cfg.topology.drafters.empty();
    const u64 staging = master_here ? 3 * p * 4 : 0;
    const bool drafter_on_gpu = master_here && !cfg.topology.drafters.front().is_cpu();
    const bool pinned_staging = drafter_on_gpu && cfg.train.checkpoint_background;
    h.parts.push_back({"checkpoint_staging", staging,
                       master_here ? fmt::format("the master drafter's weights + AdamW moments ({}) copied to host at a "
                                                 "checkpoint{}", gib(staging),
                                                 pinned_staging ? ", pinned and kept (checkpoint_background)" : "")
                                   : std::string("none: the master drafter (global rank 0) is on machine 0")});
    for (const auto& w : cpu_workers)
        h.parts.push_back({w.name + " (cpu)", w.allocated(), "the worker's model memory, computed as on a GPU in fp32"});
    if (cfg.ring.huge_pages != HugePages::Off) h.huge_pages = (ring + kHugePage - 1) / kHugePage;
    if (gpu_workers > 0) h.pinned_bytes = ring + (pinned_staging ? staging : 0);
    return h;
}

} // namespace hsring::plan
