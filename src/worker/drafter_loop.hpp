#pragma once
// The drafter worker's loop. Every drafter rank of the run (one or more per machine, DESIGN.md
// invariant 9) runs it in lockstep with the others; one round per optimizer step:
//
//   1. gather + train: take this rank's share of the step, [train] slots_per_rank training slots
//      (the oldest READY slots of this machine's ring, copied out and released as soon as their
//      copy completes, up to [drafter] inflight_slots staged), forward + backward each; fewer
//      when this machine's data is exhausted or the run stops.
//   2. gradient sync (a collective): the accumulated gradients are summed over the gang, inside
//      the backward of the step's last batch (overlapped) or afterwards.
//   3. stats (a collective): loss and weight sums, tokens, slots, flags of every rank.
//   4. if any rank trained something: the optimizer step (gradients / the global weight sum, so N
//      ranks make exactly the update one rank would on the same global batch), metrics,
//      checkpoints every [train] checkpoint_every steps (collective: train logs synced, the
//      master snapshots the state and commits it, in the background by default (the commit is
//      reported in a later round), then each rank makes its samples durable).
//   The run ends when every rank is out of data (or at [train] max_steps, or when a rank stops).
// At start the ranks agree on the step to resume from (the oldest latest checkpoint of any
// machine), the master loads it and sends its state to every rank, and each rank re-issues what
// it consumed after that step.
#include "worker/context.hpp"
#include "distributed/gang.hpp"
#include "worker/packer.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

namespace hsring::worker {

using distributed::Gang;

struct BatchResult {
    double loss_sum = 0;       // weighted loss summed over counted positions
    double weight_sum = 0;     // total weight (the loss mean is loss_sum / weight_sum)
    std::vector<double> correct, counted;  // per block position 1..B-1
    std::uint64_t tokens = 0;  // context tokens of the batch
    double h2d_ms = 0;         // time the staging copy took (device path)
    double compute_ms = 0;
    double sync_ms = 0;        // gradient sync inside this batch's backward (its last micro-batch)
};

struct StepResult {
    double grad_norm = 0;
    std::uint64_t device_peak_bytes = 0;
};

// A drafter's state as of one step, in host memory, detached from the live model.
class StateSnapshot {
public:
    virtual ~StateSnapshot() = default;
    // Writes it into the (temporary checkpoint) directory `dir`; from any one thread, once.
    virtual void write(const std::filesystem::path& dir) = 0;
};

class DrafterCompute {
public:
    virtual ~DrafterCompute() = default;
    // The master (and a single rank): loads a committed checkpoint directory, or initialises
    // fresh weights ([drafter] init or random) when null.
    virtual void restore(const std::filesystem::path* checkpoint) = 0;
    // Every other rank: builds the model to receive the master's state.
    virtual void prepare_replica() = 0;
    // Collective (world > 1): every rank takes the master's weights and optimizer state.
    virtual void broadcast_state() = 0;
    // Before any sample of an acquired slot is consumed: false when its bytes are gone (a peer
    // copy whose target died; the slot was freed and its samples re-issued): take the next slot.
    virtual bool receive(ReadSlot& slot) {
        (void)slot;
        return true;
    }
    // Takes the slot: copies its payload (and the batch) into an in-flight buffer and releases
    // the slot as soon as the copy completes (now, or from poll()/train_one()). keep[i] == 0:
    // sample i must not be trained (its ledger entry was re-issued).
    virtual void stage(ReadSlot slot, PackedBatch batch, std::vector<std::uint8_t> keep) = 0;
    virtual std::size_t staged() const = 0;
    // The oldest staged batch is a held-out (evaluation) slot: the loss and per-position accuracy
    // without gradients, at anchors fixed per held-out sample (the same in every round).
    // `sample_ids` names each sample of the batch in the held-out set.
    virtual BatchResult evaluate_one(const std::vector<std::uint64_t>& sample_ids) = 0;
    // Forward + backward on the oldest staged batch; gradients accumulate until optimizer_step.
    // sync_grads: it is the step's last batch: sum the accumulated gradients over the gang in its
    // backward (a collective; see synced()).
    virtual BatchResult train_one(bool sync_grads) = 0;
    // Whether the last train_one(true) did sum the gradients (false when its last micro-batch had
    // no block to train: then sync_grads() must run).
    virtual bool synced() const = 0;
    // Collective: sums the accumulated gradients over the gang now (the step's last batch did not).
    // Returns the milliseconds it took.
    virtual double sync_grads() = 0;
    // Applies the (summed) gradients divided by the gang's total loss weight, at learning rate lr.
    virtual StepResult optimizer_step(double lr, double weight_sum) = 0;
    // Drops accumulated gradients (a round in which no rank trained anything).
    virtual void discard_grads() = 0;
    // Everything a restart needs, copied out of the model now (master only, between two steps):
    // training may change the model as soon as this returns. The copy is written later, possibly
    // on another thread while training goes on (CheckpointWriter).
    virtual std::unique_ptr<StateSnapshot> snapshot() = 0;
    // The trained drafter in the format users load (HF directory; master only).
    virtual void export_model(const std::filesystem::path& dir) = 0;
    // Releases slots whose copies have completed.
    virtual void poll() {}
};

int run_drafter(Context& ctx, DrafterCompute& compute, Gang& gang);

} // namespace hsring::worker
