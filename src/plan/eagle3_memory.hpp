#pragma once
// The EAGLE-3 drafter worker's predicted memory ([drafter] type = "eagle3",
// src/model/drafter/eagle3/): memory_model.cpp's table of drafter types hands such a config here.
// Counted from what the code keeps alive (eagle3/drafter.cpp forward_steps, eagle3/loss.cpp);
// the counts are written out in eagle3_memory.cpp and src/plan/README.md.
#include "plan/worker_memory.hpp"
#include "plan/workload.hpp"

#include <cstdint>
#include <string>

namespace hsring::plan {

// fc [H, 3H], one Llama layer over a [2H] input (q/k/v [., 2H], o, SwiGLU, input_layernorm,
// hidden_norm, post_attention_layernorm) and the final norm. The draft LM head rows are frozen.
std::uint64_t eagle3_params(const ModelShape& s);

// Rows of the training-time test for a micro-batch: every token of a sample but its last
// (eagle3_rows in eagle3/loss.cpp).
std::uint64_t eagle3_rows(const MicroBatch& mb);

// The part of the peak that depends on the micro-batch (ranks micro-batches by memory).
std::uint64_t eagle3_batch_peak(const Config& cfg, const Derived& d, Place place, const MicroBatch& mb,
                                bool grads_in_forward);

// An EAGLE-3 drafter worker training micro-batch `mb` (see drafter_memory).
WorkerMemory eagle3_drafter_memory(const Config& cfg, const Derived& d, const std::string& name, Place place,
                                   const MicroBatch& mb, bool grads_in_forward, std::uint64_t world);

} // namespace hsring::plan
