#pragma once
// Predicted peak memory of each worker and of host RAM, as named parts, counted from what the
// code keeps alive (src/model/README.md; the counts are written out in memory_model.cpp, the
// drafter types' files and src/plan/README.md). GPU parts are what torch's caching allocator
// counts as allocated (the number `hsring-bench` and metrics.jsonl report as peak), plus two
// stated overheads outside it: the CUDA context and the allocator's slack (cached but unused
// blocks).
#include "hsring/config.hpp"
#include "hsring/units.hpp"
#include "plan/worker_memory.hpp"
#include "plan/workload.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace hsring::plan {

std::uint64_t target_params(const ModelShape& s);
// The trained parameters of the config's drafter type ([drafter] type: DFlash's or EAGLE-3's).
std::uint64_t drafter_type_params(const Config& cfg, const Derived& d);

// A target worker forwarding `batch_tokens` tokens in one packed batch.
WorkerMemory target_memory(const Config& cfg, const Derived& d, const std::string& name, Place place,
                           std::uint64_t batch_tokens);

// The drafter functions below model the config's drafter type through its DrafterPlan (drafter_plan.hpp,
// one line a type in drafter_plans.cpp): DFlash in dflash_memory.{hpp,cpp}, EAGLE-3 in eagle3_memory.{hpp,cpp}.

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
