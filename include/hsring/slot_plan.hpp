#pragma once
// The packer's plan (invariant 10, docs/architecture.md): which samples form each slot and which slots form
// each optimizer step, fixed per epoch before the run from the config, the data and the seed —
// never by timing or by what died.
//
//   ledger positions  | epoch 0: e0p0 e0p1 e0p2 ... | epoch 1: ...      (data::ShardOrder)
//   plan slots        | [p0 p1 p2] [p3 p4] [p5 ...] | [...] ...        greedy, per epoch: a slot
//                                                                        ends before the sample that
//                                                                        would overflow slot_tokens
//                                                                        or max_samples_per_slot
//   optimizer steps   | step 1: slots 0..S-1 | step 2: slots S..2S-1 | ...   (S = slots per step
//                       on this machine: rank r trains slots r*per_rank .. (r+1)*per_rank - 1 of it)
//
// The plan lives in the ledger (hsring/ledger.hpp): the supervisor computes it when it creates
// the ledger, targets produce its slots (in any order, within a window), drafters train them in
// this order. A plan slot that dies with a worker is produced again whole: the same samples, the
// same slot, the same step.
#include "hsring/dataset.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace hsring {

// The first ledger position of every plan slot of a machine's share (epochs x share positions,
// data::ShardOrder), then the total: plan slot j holds positions [first[j], first[j + 1]).
std::vector<std::uint64_t> plan_slots(const data::Dataset& data, std::uint64_t seed, bool shuffle, std::uint32_t nnodes,
                                      std::uint32_t node_rank, std::uint32_t epochs, std::uint64_t slot_tokens,
                                      std::uint32_t max_samples);

// How a drafter trains one slot: its sequences (`lengths` tokens each, in slot order) in
// micro-batches of consecutive whole sequences while their tokens stay <= limit ([train]
// micro_batch_tokens); a longer sequence forms a micro-batch alone. [first, last) index pairs.
// The drafter worker trains and evaluates by it, the planner counts memory by it.
std::vector<std::pair<std::size_t, std::size_t>> split_micro_batches(std::span<const std::uint64_t> lengths,
                                                                     std::uint64_t limit);

// Which plan slots a drafter rank trains in which optimizer step, on one machine. A drafter gang
// that resumes from the checkpoint of step s rebases the plan there: steps after s train the
// plan slots from the first one not trained in steps <= s, per_rank x ranks a step. With the
// settings the steps up to s were planned with, that is the same grid (a killed run trains what
// an unkilled one does); with other ones (more epochs after a run whose last step was short, a
// new [train] tokens_per_step, another number of drafter ranks) the rest is planned again, and no
// plan slot is skipped or trained twice.
//
//   plan slots   | ... trained in steps <= base_step ... | base_slot ... step base_step + 1 | ...
struct PlanSteps {
    std::uint64_t slots = 0;      // plan slots of this machine
    std::uint32_t per_rank = 1;   // slots per drafter rank per step (Derived::slots_per_rank)
    std::uint32_t ranks = 1;      // drafter ranks of this machine
    std::uint64_t base_step = 0;  // the step the plan was rebased after (0: the run's start)
    std::uint64_t base_slot = 0;  // the first plan slot of step base_step + 1

    std::uint64_t per_step() const { return std::uint64_t{per_rank} * ranks; }
    // Steps up to the last one with a plan slot of this machine.
    std::uint64_t steps() const { return base_step + (slots - std::min(base_slot, slots) + per_step() - 1) / per_step(); }
    // 1-based optimizer step of plan slot j >= base_slot, and the local rank that trains it.
    std::uint64_t step_of(std::uint64_t j) const { return base_step + (j - base_slot) / per_step() + 1; }
    std::uint32_t rank_of(std::uint64_t j) const {
        return static_cast<std::uint32_t>(((j - base_slot) % per_step()) / per_rank);
    }
    // Rank r's plan slots of step k > base_step (1-based): [first, second); empty past the plan's
    // end and at or before base_step.
    std::pair<std::uint64_t, std::uint64_t> share(std::uint64_t step, std::uint32_t rank) const {
        if (step <= base_step) return {slots, slots};
        const std::uint64_t b = base_slot + (step - base_step - 1) * per_step() + std::uint64_t{rank} * per_rank;
        return {std::min(b, slots), std::min(b + per_rank, slots)};
    }
    // Rank r's next plan slot after j (its share continues in the next step), or slots.
    std::uint64_t next_of_rank(std::uint64_t j, std::uint32_t rank) const {
        const std::uint64_t n = j + 1;
        if (n < slots && rank_of(n) == rank && (n - base_slot) % per_rank != 0) return n;
        const auto [b, e] = share(step_of(j) + 1, rank);
        return b < e ? b : slots;
    }
};

} // namespace hsring
