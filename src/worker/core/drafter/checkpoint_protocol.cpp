#include "worker/core/drafter/checkpoint_protocol.hpp"

#include "hsring/fault.hpp"
#include "hsring/error.hpp"
#include "hsring/log.hpp"
#include "hsring/units.hpp"

#include <chrono>
#include <cstdlib>

namespace hsring::worker {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
} // namespace

CheckpointProtocol::CheckpointProtocol(Context& ctx, DrafterCompute& compute, distributed::Gang& gang, TrainLog& log)
    : ctx_(ctx), compute_(compute), gang_(gang), log_(log), store_(ctx.env.run_dir / "checkpoints") {}

// A full disk fails the write halfway, again after every restart (seen on a GPU machine: five
// restarts, then the run stopped). Restarting cannot free space: a user error (exit 3) before the
// write starts, saying how much is needed. The checkpoint before it is pruned only after this one
// is committed, so a new one needs its whole size free.
void CheckpointProtocol::require_room(std::uint64_t step, std::uint64_t bytes) {
    std::error_code ec;
    const std::filesystem::path dir = ctx_.env.run_dir / "checkpoints";
    auto space = std::filesystem::space(dir, ec);
    if (const char* f = std::getenv("HSRING_TEST_DISK_FREE")) space.available = std::strtoull(f, nullptr, 10);  // tests
    constexpr std::uint64_t kMargin = std::uint64_t{64} << 20;  // metrics, logs and the export after it
    if (ec || space.available >= bytes + kMargin) return;
    throw UserError(fmt::format("the checkpoint of step {} needs about {} plus {} kept free for logs and metrics, but "
                                "{} has {} free: free disk space (older runs' checkpoints, exports), or choose another "
                                "run directory (--run-dir DIR); `hsring run` then resumes from the last checkpoint",
                                step, format_bytes(bytes), format_bytes(kMargin), dir.string(),
                                format_bytes(space.available)));
}

void CheckpointProtocol::barrier() {
    double one = 1;
    gang_.allreduce_sum({&one, 1});
}

void CheckpointProtocol::take(std::uint64_t step, const json& state, bool wait) {
    const auto t0 = Clock::now();
    const bool background = ctx_.cfg.train.checkpoint_background && !wait;
    if (!background) drain();  // in place: every write in flight is committed first
    if (step == checkpointed_ || (!pending_.empty() && pending_.back() == step)) return;
    if (background && pending_.size() >= CheckpointWriter::kMaxInFlight) {
        // Both host buffers are held by writes: waiting would stall training for a disk write.
        if (!delayed_)
            log::warn("checkpoint of step {} delayed: the writes of steps {} and {} are still in flight (the disk "
                      "writes slower than [train] checkpoint_every steps take); taken after the first step that "
                      "finds a buffer free", step, pending_.front(), pending_.back());
        delayed_ = true;
        return;
    }
    // Exactly once (invariant 4, docs/architecture.md): every rank's train records of steps <= step are on
    // disk before the checkpoint exists; samples turn durable only after it exists.
    log_.sync();
    // The barrier also tells every rank whether the master has a host buffer ready (its pinned
    // buffers are allocated after the first step, and a write may hold one): if not, every rank
    // delays the checkpoint alike.
    double ready = gang_.place().is_master() && background ? (compute_.snapshot_ready() ? 1.0 : 0.0) : 0.0;
    gang_.allreduce_sum({&ready, 1});
    if (background && ready == 0) {
        if (!delayed_)
            log::warn("checkpoint of step {} delayed: no host buffer is ready yet (pinned buffers are allocated "
                      "after the first step); taken after the first step that finds one", step);
        delayed_ = true;
        return;
    }
    delayed_ = false;
    if (gang_.place().is_master()) {
        // The state is copied out now (into a host buffer no write holds); the job only touches
        // that copy and the store (the loop thread uses the store on the master only here and at
        // resume).
        std::shared_ptr<StateSnapshot> snap = compute_.snapshot();
        require_room(step, snap->bytes());
        auto job = [this, step, snap = std::move(snap), text = state.dump() + "\n"]() mutable {
            const auto w0 = Clock::now();
            const auto tmp = store_.begin(step);
            snap->write(tmp);
            snap.reset();  // the host buffer is free for the next snapshot
            store_.write_file(tmp, "state.json", text);
            fault::point("checkpoint");  // written, not committed
            store_.commit(step, tmp);
            written_ms_.store(ms_since(w0));
        };
        if (background) writer_.start(step, std::move(job));
        else job();
    }
    if (background) {
        // Every rank: the commit is reported by a later round (RoundStats::committed) or drained.
        pending_.push_back(step);
        pause_ms_ = ms_since(t0);
        log::info("checkpoint step {}: state copied in {:.0f} ms, written in the background while training goes on{}",
                  step, pause_ms_, pending_.size() > 1 ? fmt::format(" (after step {}'s write)", pending_.front()) : "");
        return;
    }
    barrier();
    finish(step);
    pause_ms_ = ms_since(t0);
    log::info("checkpoint step {} written and committed in {:.0f} ms (training paused)", step, pause_ms_);
}

void CheckpointProtocol::drain() {
    if (pending_.empty()) return;
    // Collective, like take(): every rank knows pending_ (they all took those checkpoints).
    if (gang_.place().is_master()) writer_.wait();  // rethrows a failed write
    barrier();
    finish(pending_.back());
}

std::uint64_t CheckpointProtocol::written() {
    if (!gang_.place().is_master() || !writer_.in_flight()) return 0;
    return writer_.collect();
}

void CheckpointProtocol::finish(std::uint64_t step) {
    const GangPlace& p = gang_.place();
    if (p.is_local_leader() && p.node_rank != 0) {
        // The other machines record that the master committed `step` (the weights stay with the
        // master); their supervisors rebuild a lost ledger from it and their train logs.
        const auto tmp = store_.begin(step);
        const json st = {{"step", step}, {"marker", true}, {"weights", "on machine 0 (the master)"}};
        store_.write_file(tmp, "state.json", st.dump() + "\n");
        store_.commit(step, tmp);
    }
    fault::point("commit");  // committed; the train log's K record and the durable marks not yet
    checkpointed_ = step;
    log_.checkpoint(ctx_.env.incarnation, step);
    const std::uint64_t n = ctx_.ledger.make_durable(ctx_.env.rank, step);
    const bool background = !pending_.empty() && pending_.front() <= step;
    // Writes commit in step order: the ones before `step` are committed too (a later K record and
    // durable marks cover them).
    while (!pending_.empty() && pending_.front() <= step) pending_.pop_front();
    if (background)
        log::info("checkpoint step {} committed (written in {:.0f} ms in the background; {} samples durable)", step,
                  written_ms_.load(), n);
    else
        log::info("checkpoint step {} committed ({} samples durable)", step, n);
}

} // namespace hsring::worker
