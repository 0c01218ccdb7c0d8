#pragma once
// The drafter worker's loop. Every drafter rank of the run (one or more per machine, docs/architecture.md
// invariant 9) runs it in lockstep with the others; one round per optimizer step k:
//
//   1. gather + train: this rank's share of step k in the packer's plan (hsring/slot_plan.hpp:
//      [train] slots_per_rank plan slots, fixed before the run), in plan order: each is acquired
//      from the ring when a target has written it (whichever target, whenever), its samples
//      consumed into the ledger, copied out (up to [drafter] inflight_slots staged ahead) and
//      trained, forward + backward. Held-out slots are evaluated as they come.
//   2. gradient sync (a collective): the accumulated gradients are summed over the gang, inside
//      the backward of the step's last batch (overlapped) or afterwards.
//   3. stats (a collective): loss and weight sums, tokens, slots, flags of every rank.
//   4. the optimizer step, if every rank has its whole share (a stop never makes a short step)
//      and the loss and the gradient norm are finite (else the step changes nothing and is
//      reported; [train] max_nonfinite_steps in a row stop the run); metrics; checkpoints every
//      [train] checkpoint_every steps (collective: train logs synced, the master snapshots the
//      state and commits it, in the background by default (the commit is reported in a later
//      round), then each rank makes its samples durable).
//   The run ends when every rank's plan is trained (or at [train] max_steps, or when a rank
//   stops). Training is a function of config, data and seed (invariant 10, docs/architecture.md): which
//   samples form a slot, which slots a step and the order of steps never depend on timing or on
//   what died.
// At start the ranks agree on the step to resume from (the oldest latest checkpoint of any
// machine), the master loads it and sends its state to every rank, and each rank re-issues the
// plan slots it consumed after that step (they are produced again, whole, for the same step).
#include "worker/core/context.hpp"
#include "distributed/gang.hpp"
#include "worker/core/packer.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
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
    bool finite_input = true;  // every hidden state that arrived was finite
};

struct StepResult {
    double grad_norm = 0;
    bool skipped = false;      // the gradient norm was not finite: nothing changed (weights, moments, steps)
    std::uint64_t device_peak_bytes = 0;
};

// A drafter's state as of one step, in host memory, detached from the live model.
class StateSnapshot {
public:
    virtual ~StateSnapshot() = default;
    // Writes it into the (temporary checkpoint) directory `dir`; from any one thread, once.
    virtual void write(const std::filesystem::path& dir) = 0;
    // About how many bytes write() puts on disk.
    virtual std::uint64_t bytes() const = 0;
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
    // Applies the (summed) gradients divided by the gang's total loss weight, at learning rate lr,
    // unless their norm is not finite (then nothing changes: StepResult::skipped). Every rank of a
    // gang holds the same summed gradients, so every rank decides alike.
    virtual StepResult optimizer_step(double lr, double weight_sum) = 0;
    // Drops accumulated gradients (a round in which no rank trained anything).
    virtual void discard_grads() = 0;
    // Everything a restart needs, copied out of the model now (master only, between two steps):
    // training may change the model as soon as this returns. The copy is written later, possibly
    // on another thread while training goes on (CheckpointWriter). Throws NonFiniteState when a
    // value is not finite (nothing non-finite is ever checkpointed).
    virtual std::unique_ptr<StateSnapshot> snapshot() = 0;
    // Master: whether snapshot() would copy into a host buffer that is ready now (background
    // checkpoints stage into buffers allocated after the first step and held by writes in
    // flight); false: a background checkpoint is delayed instead of waiting for one.
    virtual bool snapshot_ready() { return true; }
    // The trained drafter in the format users load (HF directory; master only). Throws
    // NonFiniteState when a value is not finite (nothing non-finite is ever exported).
    virtual void export_model(const std::filesystem::path& dir) = 0;
    // Releases slots whose copies have completed.
    virtual void poll() {}
};

// The drafter's state holds a value that is not finite (checked before a checkpoint, an export,
// and when a checkpoint is loaded): the run stops with exit code kDiverged, the last good
// checkpoint kept.
struct NonFiniteState : std::runtime_error {
    using std::runtime_error::runtime_error;
};

int run_drafter(Context& ctx, DrafterCompute& compute, Gang& gang);

} // namespace hsring::worker
