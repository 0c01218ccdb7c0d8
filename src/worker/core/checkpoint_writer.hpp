#pragma once
// Writes checkpoints on a thread of its own, one after another in the order they were started,
// so that training goes on while the state (tens of GB for a large drafter) reaches the disk.
// Up to kMaxInFlight writes may be queued or running: a snapshot is staged into the host buffer
// that no write holds (double buffering), so a write still running never blocks the next one.
// The drafter loop owns the order that exactly-once relies on (invariant 4, docs/architecture.md): train
// logs synced before the snapshot; the commit (fsync + rename, here on the writer thread, in
// step order); only then, back on the loop thread, the train log's K record and the ledger's
// durable marks (CheckpointProtocol::finish).
//
// Thread-safety: start/in_flight/collect/wait are called from the loop thread only; jobs run on
// the writer thread and touch nothing but what they captured. A job's captures (its host
// buffer) are released before it counts as done.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace hsring::worker {

class CheckpointWriter {
public:
    static constexpr std::size_t kMaxInFlight = 2;

    CheckpointWriter() = default;
    CheckpointWriter(const CheckpointWriter&) = delete;
    CheckpointWriter& operator=(const CheckpointWriter&) = delete;
    // Finishes the job running and drops the queued ones (their results are dropped: the process
    // is ending anyway, and an uncommitted checkpoint is only a stale temporary directory for the
    // next start to remove).
    ~CheckpointWriter();

    // Queues `job` (write + commit the checkpoint of `step`, steps increasing). At most
    // kMaxInFlight started and not yet collected.
    void start(std::uint64_t step, std::function<void()> job);
    // Writes started and not yet collected (queued, running, or done).
    std::size_t in_flight() const { return jobs_.size(); }
    // The step of the newest write that has finished, collecting every finished one (they finish
    // in order); 0 if the oldest is not done. Rethrows what a job threw.
    std::uint64_t collect();
    // Blocks until every started write has finished; collects them and returns the newest step
    // (0 if none). Rethrows what a job threw.
    std::uint64_t wait();

private:
    struct Job {
        std::uint64_t step = 0;
        std::function<void()> run;
        bool done = false;             // under mu_
        std::exception_ptr error;      // under mu_
    };
    std::mutex mu_;
    std::condition_variable cv_;       // a job was queued / finished, or stopping
    std::deque<Job> jobs_;             // oldest first; the loop thread pops only done ones
    bool stopping_ = false;
    std::thread thread_;               // started with the first job

    void loop();
    std::uint64_t pop_done(std::unique_lock<std::mutex>& lock);
};

} // namespace hsring::worker
