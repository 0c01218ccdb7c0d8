#pragma once
// Predicted peak memory of each worker and of host RAM, as named parts, counted from what the
// code keeps alive (src/model/README.md; the counts are written out in memory_model.cpp and
// src/plan/README.md). GPU parts are what torch's caching allocator counts as allocated (the
// number `hsring-bench` and metrics.jsonl report as peak), plus two stated overheads outside
// it: the CUDA context and the allocator's slack (cached but unused blocks).
#include "hsring/config.hpp"
#include "hsring/units.hpp"
#include "plan/workload.hpp"

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

std::uint64_t target_params(const ModelShape& s);
// A DFlash drafter's parameters (`layers` decoder layers fusing `context_layers` target layers).
std::uint64_t drafter_params(const ModelShape& s, std::uint64_t layers, std::uint64_t context_layers);
// The trained parameters of the config's drafter type ([drafter] type: DFlash's or EAGLE-3's).
std::uint64_t drafter_type_params(const Config& cfg, const Derived& d);

// A target worker forwarding `batch_tokens` tokens in one packed batch.
WorkerMemory target_memory(const Config& cfg, const Derived& d, const std::string& name, Place place,
                           std::uint64_t batch_tokens);

// The drafter functions below model the config's drafter type: DFlash here, EAGLE-3 in
// eagle3_memory.{hpp,cpp} ([drafter] type = "eagle3").

// The part of a drafter's peak that depends on the micro-batch (activations, loss chunk or
// backward transients, gradients when they exist then): ranks micro-batches by memory.
std::uint64_t drafter_batch_peak(const Config& cfg, const Derived& d, Place place, const MicroBatch& mb,
                                 bool grads_in_forward);

// Drafter ranks in the gang: [distributed] nnodes x the drafters per machine.
std::uint64_t gang_world(const Config& cfg);

// A drafter worker training micro-batch `mb` (its worst). grads_in_forward: a step holds several
// micro-batches, so fp32 gradients exist while later ones run forward (always true in a gang:
// its gradients live in the reducer's buckets from the start). world > 1: a rank of a gang of
// that many (NCCL buffers; the one-time bucket rebuild after the first step when it is the peak).
WorkerMemory drafter_memory(const Config& cfg, const Derived& d, const std::string& name, Place place,
                            const MicroBatch& mb, bool grads_in_forward, std::uint64_t world);

// Shared by the drafter types' models. A GPU worker's overheads outside torch's allocator (the CUDA
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

struct HostMemory {
    std::vector<Part> parts;
    std::uint64_t huge_pages = 0;     // 2 MiB pages the ring needs ([ring] huge_pages != "off")
    std::uint64_t pinned_bytes = 0;   // registered with CUDA (the ring, once per machine)
    std::uint64_t total() const;
};

// cpu_workers: workers placed on "cpu" (their model memory is host RAM).
HostMemory host_memory(const Config& cfg, const Derived& d, const SampleSource& source,
                       const std::vector<WorkerMemory>& cpu_workers);

} // namespace hsring::plan
