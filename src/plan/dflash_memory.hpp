#pragma once
// The DFlash drafter worker's predicted memory ([drafter] type = "dflash",
// src/model/drafter/dflash/): counted from what DFlashDrafterImpl::forward, dflash_loss and the
// chunked cross-entropy keep alive; the counts are written out in dflash_memory.cpp and
// src/plan/README.md.
#include "plan/worker_memory.hpp"
#include "plan/workload.hpp"

#include <cstdint>
#include <string>

namespace hsring::plan {

// A DFlash drafter's parameters (`layers` decoder layers fusing `context_layers` target layers).
std::uint64_t dflash_params(const ModelShape& s, std::uint64_t layers, std::uint64_t context_layers);

// The part of the peak that depends on the micro-batch (ranks micro-batches by memory).
std::uint64_t dflash_batch_peak(const Config& cfg, const Derived& d, Place place, const MicroBatch& mb,
                                bool grads_in_forward);

// A DFlash drafter worker training micro-batch `mb` (see drafter_memory in memory_model.hpp).
WorkerMemory dflash_drafter_memory(const Config& cfg, const Derived& d, const std::string& name, Place place,
                                   const MicroBatch& mb, bool grads_in_forward, std::uint64_t world);

} // namespace hsring::plan
