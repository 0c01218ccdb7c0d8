#pragma once
// Writes one checkpoint at a time on a thread of its own, so that training goes on while the
// state (tens of GB for a large drafter) reaches the disk. The drafter loop owns the order that
// exactly-once relies on (DESIGN.md invariant 4): train logs synced before the snapshot; the
// commit (fsync + rename, here on the writer thread); only then, back on the loop thread, the
// train log's K record and the ledger's durable marks (Drafter::finish_checkpoint).
//
// Thread-safety: start/done/wait/step are called from the loop thread only; the job runs on the
// writer thread and touches nothing but what it captured.
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>

namespace hsring::worker {

class CheckpointWriter {
public:
    CheckpointWriter() = default;
    CheckpointWriter(const CheckpointWriter&) = delete;
    CheckpointWriter& operator=(const CheckpointWriter&) = delete;
    // Joins a write still running (its result is dropped: the process is ending anyway, and an
    // uncommitted checkpoint is only a stale temporary directory for the next start to remove).
    ~CheckpointWriter();

    // Runs `job` (write + commit the checkpoint of `step`) on the writer thread. At most one at a
    // time: wait() for the previous one first.
    void start(std::uint64_t step, std::function<void()> job);
    // The step of the write in flight or finished but not yet collected by wait(); 0 if none.
    std::uint64_t step() const { return step_; }
    // The job returned (or threw); wait() then does not block.
    bool done() const { return done_.load(std::memory_order_acquire); }
    // Blocks until the job returned; rethrows what it threw. Returns its step (0 if none).
    std::uint64_t wait();

private:
    std::thread thread_;
    std::uint64_t step_ = 0;
    std::exception_ptr error_;       // written by the writer thread before done_ (release)
    std::atomic<bool> done_{false};
};

} // namespace hsring::worker
