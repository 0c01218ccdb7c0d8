// The shared parts of the memory models (see worker_memory.hpp).
#include "plan/worker_memory.hpp"

#include <fmt/format.h>

#include <cmath>

namespace hsring::plan {
namespace {

using u64 = std::uint64_t;

u64 slack(u64 allocated) { return static_cast<u64>(std::llround(static_cast<double>(allocated) * kAllocatorSlack)); }

} // namespace

void add_overheads(WorkerMemory& w) {
    if (w.place.is_cpu()) return;
    const u64 a = w.allocated();
    w.parts.push_back({"cuda_context", kCudaContextBytes, "CUDA context, cuBLAS handles, loaded kernels (stated)", true});
    w.parts.push_back({"allocator_slack", slack(a),
                       fmt::format("{:.0f}% of the allocated peak: cached blocks not in use (stated)", kAllocatorSlack * 100),
                       true});
}

void add_optimizer_parts(WorkerMemory& w, u64 p, u64 grads, bool gang, bool grads_in_forward, u64 early,
                         const std::string& early_what) {
    w.parts.push_back({"adamw_state", 2 * p * 4, fmt::format("exp_avg + exp_avg_sq: 2 x {} parameters x 4 B", num(p))});
    if (gang)
        w.parts.push_back({"fp32_gradients", grads,
                           fmt::format("{} parameters x 4 B: the gang's gradient buckets, allocated at start (the "
                                       "gradients are views of them, reduced in place)", num(p))});
    else if (grads_in_forward)
        w.parts.push_back({"fp32_gradients", grads,
                           fmt::format("{} parameters x 4 B (a step holds several micro-batches)", num(p))});
    else if (early)
        w.parts.push_back({"fp32_gradients", early, early_what});
    else
        w.parts.push_back({"fp32_gradients", 0,
                           std::string("none at the peak: one micro-batch per optimizer step (zero_grad frees them)")});
}

void add_gang_parts(WorkerMemory& w, std::uint64_t grads, std::uint64_t p, std::uint64_t world) {
    if (world <= 1) return;
    const u64 nccl = w.place.is_cpu() ? 0 : kNcclBytes;
    w.parts.push_back({"allreduce_buffers", nccl,
                       nccl ? fmt::format("rank of a gang of {}: NCCL's own buffers (stated); the gradients are "
                                          "reduced in place in their buckets (fp32_gradients)", world)
                            : fmt::format("rank of a gang of {}: Gloo reduces the gradients in place in their "
                                          "buckets (fp32_gradients)", world)});
    // The reducer rebuilds its buckets once, at the end of the first reduced backward
    // (gradient_sync.cpp): the new buckets exist beside the old ones while the gradients move
    // over. Activations, casts and logits are freed by then; it is the peak only when the
    // gradients outweigh them (fp32 compute on a CPU, tiny activations).
    const auto kept = [](const std::string& n) {
        return n == "embedding_and_lm_head" || n == "fp8_lm_head" || n == "draft_lm_head" ||
               n == "fp32_master_weights" || n == "adamw_state" || n == "inflight_slots" || n == "allreduce_buffers";
    };
    u64 rebuild = grads;  // the new buckets
    for (const Part& part : w.parts)
        if (kept(part.name) || part.name == "fp32_gradients") rebuild += part.bytes;
    if (rebuild <= w.allocated()) return;
    WorkerMemory r{w.name, w.place, "the gang's bucket rebuild after its first reduced backward (once)", {}};
    for (const Part& part : w.parts) {
        Part q = part;
        if (q.name == "fp32_gradients") {
            r.parts.push_back(q);
            r.parts.push_back({"rebuilt_gradient_buckets", grads,
                               fmt::format("{} parameters x 4 B: the new buckets, beside the old ones while the "
                                           "gradients move over", num(p))});
            continue;
        }
        if (!kept(q.name)) {
            q.bytes = 0;
            q.how = "freed after the backward";
        }
        r.parts.push_back(q);
    }
    w = std::move(r);
}

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

} // namespace hsring::plan
