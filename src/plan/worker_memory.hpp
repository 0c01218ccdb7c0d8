#pragma once
// The parts a worker's predicted memory is made of, and the building blocks every model of a
// worker shares: the target's (memory_model.hpp) and each drafter type's (dflash_memory.hpp,
// eagle3_memory.hpp). Knows no drafter type.
#include "hsring/config.hpp"
#include "hsring/units.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace hsring::plan {

// Stated, not measured per machine: CUDA context + cuBLAS handles and loaded kernels of one
// process, outside torch's allocator.
inline constexpr std::uint64_t kCudaContextBytes = 1 * GiB;
// Cached-but-free blocks of the caching allocator on top of its allocated peak.
inline constexpr double kAllocatorSlack = 0.05;
// Host RAM of one GPU worker process besides the data set: LibTorch, the CUDA runtime's host
// side, pinned staging of the CUDA driver.
inline constexpr std::uint64_t kWorkerHostBytes = 2 * GiB;
// The same for a CPU worker (LibTorch without the CUDA runtime).
inline constexpr std::uint64_t kCpuWorkerHostBytes = 512 * MiB;
// A drafter gang (data-parallel ranks, src/distributed/gradient_sync.hpp): the gradients are
// views of the reducer's fp32 buckets, reduced in place, so a rank holds one fp32 copy of them
// for the whole run (counted as fp32_gradients); besides, NCCL's own buffers (stated, GPU only).
inline constexpr std::uint64_t kNcclBytes = 256 * MiB;

struct Part {
    std::string name;
    std::uint64_t bytes = 0;
    std::string how;        // the arithmetic, for people
    bool overhead = false;  // outside torch's allocated count (context, slack)
};

struct WorkerMemory {
    std::string name;  // "target.0", "drafter.1"
    Place place;
    std::string peak_phase;  // when the peak happens
    std::vector<Part> parts;

    std::uint64_t allocated() const;  // tensors only: comparable to torch's allocated peak
    std::uint64_t total() const;      // what the device must hold
    const Part* part(const std::string& name) const;
};

// Sizes and counts as the parts' `how` texts write them.
inline std::string gib(std::uint64_t bytes) { return format_bytes(bytes); }
inline std::string num(std::uint64_t n) { return format_count(n); }

// A model shape's dimensions as the counts use them.
struct ShapeDims {
    std::uint64_t h, q, k, i, v, d, hq, hkv, layers;
    explicit ShapeDims(const ModelShape& s)
        : h(std::uint64_t(s.hidden_size)), q(std::uint64_t(s.num_heads * s.head_dim)),
          k(std::uint64_t(s.num_kv_heads * s.head_dim)), i(std::uint64_t(s.intermediate_size)),
          v(std::uint64_t(s.vocab_size)), d(std::uint64_t(s.head_dim)), hq(std::uint64_t(s.num_heads)),
          hkv(std::uint64_t(s.num_kv_heads)), layers(std::uint64_t(s.num_layers)) {}
};

// A GPU worker's overheads outside torch's allocator (the CUDA
// context and the allocator's slack); none on the CPU.
void add_overheads(WorkerMemory& w);
// A gang rank (world > 1): NCCL's buffers (`allreduce_buffers`), and when the reducer's one-time
// bucket rebuild after the first reduced backward outweighs the micro-batch's peak, that moment
// instead (the frozen parts, master weights, AdamW state, slots and both bucket sets; the rest
// freed). `grads`: the fp32 gradients' bytes (p parameters x 4 B).
void add_gang_parts(WorkerMemory& w, std::uint64_t grads, std::uint64_t params, std::uint64_t world);
// AdamW's two fp32 moments of `params`, then the fp32 gradients (`grads` bytes) at the peak: a
// gang's buckets (allocated at start), a step of several micro-batches' (held through forward),
// else the `early` bytes the type's backward accumulates before its peak (`early_what`; 0: none).
void add_optimizer_parts(WorkerMemory& w, std::uint64_t params, std::uint64_t grads, bool gang, bool grads_in_forward,
                         std::uint64_t early, const std::string& early_what);

} // namespace hsring::plan
