#pragma once
// The drafter gang's checkpoint protocol (invariant 4, docs/architecture.md: a sample turns durable only once
// the weights it went into are on disk). Every rank runs it at the same step:
//
//   take(step):  every train log synced (T records of steps <= step on disk) -> barrier ->
//                the master copies the state out of the model (snapshot) and writes + commits it,
//                on the writer thread by default ([train] checkpoint_background), else in place
//   finish(step) (after the commit is known to every rank: a barrier, or the round that reports
//                the background commit): other machines write their marker, each rank writes its
//                train log's K record and makes its samples of steps <= step durable
//
// Up to two background writes are in flight (CheckpointWriter::kMaxInFlight, each with its own
// host buffer): take() pauses training only for the barrier and the device -> host copy, never
// for a write still running. With two in flight a checkpoint due is delayed (said in the log,
// tried again after every step: delayed()) rather than waited for. Every rank knows the writes in
// flight (it took them, and finishes them in the same round), so every rank decides alike.
// Thread-safety: the loop thread only; the write jobs touch only what they captured.
#include "distributed/gang.hpp"
#include "hsring/train_log.hpp"
#include "worker/core/checkpoint_store.hpp"
#include "worker/core/checkpoint_writer.hpp"
#include "worker/core/context.hpp"
#include "worker/core/drafter_loop.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <deque>

namespace hsring::worker {

class CheckpointProtocol {
public:
    CheckpointProtocol(Context& ctx, DrafterCompute& compute, distributed::Gang& gang, TrainLog& log);

    CheckpointStore& store() { return store_; }
    // The step of the last committed checkpoint (every rank knows it).
    std::uint64_t committed() const { return checkpointed_; }
    // At start: the gang resumed from the checkpoint of `step` (0: none).
    void resumed(std::uint64_t step) { checkpointed_ = step; }

    // Collective: checkpoints the weights after `step`, with `state` as its state.json (the
    // master's). wait: committed before it returns, also with checkpoint_background.
    void take(std::uint64_t step, const nlohmann::json& state, bool wait);
    // Collective: every background write still in flight is committed and finished.
    void drain();
    // A background checkpoint was due but not taken (two writes in flight): take one after the
    // next step.
    bool delayed() const { return delayed_; }
    // Collective: the master's commit of `step` is known to every rank (see the top).
    void finish(std::uint64_t step);
    // Master, once per round: the step of the newest background write that has finished since
    // (0: none); rethrows a failed write (the master exits; the gang restarts from the last commit).
    std::uint64_t written();
    // How long the last checkpoint paused training in ms, reported once (then -1).
    double take_pause_ms() { return std::exchange(pause_ms_, -1.0); }

private:
    Context& ctx_;
    DrafterCompute& compute_;
    distributed::Gang& gang_;
    TrainLog& log_;
    CheckpointStore store_;
    CheckpointWriter writer_;             // the master's background writes
    std::uint64_t checkpointed_ = 0;      // step of the last committed checkpoint
    std::deque<std::uint64_t> pending_;   // steps written in the background, not yet finished (oldest first)
    bool delayed_ = false;                // a checkpoint was due with two writes in flight
    std::atomic<double> written_ms_{0};   // how long the last background write took (writer thread)
    double pause_ms_ = -1;                // how long the last checkpoint paused training; -1: reported

    void barrier();
    void require_room(std::uint64_t step, std::uint64_t bytes);
};

} // namespace hsring::worker
