// The drafter gang's start (see worker/core/drafter_loop.hpp): the step every rank resumes from, the
// master's state sent to every rank, what the ledger re-issues.
#include "worker/core/drafter/drafter.hpp"

#include "hsring/error.hpp"
#include "hsring/fault.hpp"
#include "hsring/log.hpp"
#include "hsring/wall_clock.hpp"

namespace hsring::worker {

using nlohmann::json;

bool Drafter::restore() {
    // Resume from the oldest of the machines' latest checkpoints: the master keeps the last two,
    // and a machine that died between the master's commit and its own marker is one behind.
    // A drafter restarted after the run completed (killed between marking it done and exiting):
    // every machine's ledger says so, the export exists; the targets are gone. Nothing to do.
    double done = ctx_.ledger.done() ? 0.0 : 1.0;
    gang_.allreduce_max({&done, 1});
    if (done == 0) {
        log::info("the run is complete already (the ledger says every epoch is trained): nothing to do");
        return false;
    }
    CheckpointStore& store = checkpoints_.store();
    const std::uint64_t mine = store.latest_step();
    double v = -static_cast<double>(mine);
    gang_.allreduce_max({&v, 1});
    fault::point("restore");  // HSRING_FAULT: the gang formed, the state not yet sent
    const auto s = static_cast<std::uint64_t>(-v);
    // tokens_done, warmup_end_tokens, samples_done (from the master), held-out samples (each machine's)
    double state[4] = {0, 0, 0, 0};
    double load_s = 0;
    // The master's view of the gang the checkpoint was written by (metrics.jsonl's resume row).
    json before = json::object();
    if (gang_.place().is_master()) {
        if (s) {
            const auto dir = store.dir_of(s);
            if (!std::filesystem::is_directory(dir / "drafter") && ctx_.cfg.run.mode == RunMode::Train)
                fail("the gang resumes from step {} (the oldest latest checkpoint of its machines), but {} holds no "
                     "weights of that step: the master's run directory lost them", s, dir.string());
            const auto t0 = Clock::now();
            compute_.restore(&dir);
            load_s = std::chrono::duration<double>(Clock::now() - t0).count();
            const json st = json::parse(store.read_file(s, "state.json").value_or(""), nullptr, false);
            if (st.is_object()) {
                state[0] = st.value("tokens_total", 0.0);
                state[1] = st.value("warmup_end_tokens", 0.0);
                state[2] = st.value("samples_total", 0.0);
                if (st.contains("world")) before["world_before"] = st["world"];
                if (st.contains("unix_time"))
                    before["since_checkpoint_s"] = unix_seconds() - st.value("unix_time", 0.0);
            }
            log::info("resumed from checkpoint step {} ({}; loaded in {:.1f} s)", s, dir.string(), load_s);
        } else {
            compute_.restore(nullptr);
            log::info("no checkpoint: fresh drafter weights");
        }
    } else {
        compute_.prepare_replica();
    }
    if (ctx_.eval && gang_.place().is_local_leader()) state[3] = static_cast<double>(ctx_.eval->samples());
    if (gang_.world() > 1) {
        compute_.broadcast_state();
        gang_.allreduce_sum(state);  // the others contributed zeros
        log::info("drafter rank {} of {} (machine {}, local rank {}): state of step {} received from the master",
                  gang_.rank(), gang_.world(), gang_.place().node_rank, gang_.place().local_rank, s);
    }
    tokens_done_ = static_cast<std::uint64_t>(state[0]);
    warmup_end_tokens_ = static_cast<std::uint64_t>(state[1]);
    samples_done_ = static_cast<std::uint64_t>(state[2]);
    eval_.set_total(static_cast<std::uint64_t>(state[3]));
    eval_.close_stale();
    step_ = s;
    checkpoints_.resumed(s);
    stats_.step = s;  // status shows the restored step, not 0, until the first new one
    log_.resume(ctx_.env.incarnation, s);
    if (metrics_) {
        // Rows of steps after s written by an earlier incarnation were rolled back (their weights
        // died with it): readers (bin/plot-run) keep the ones after this line instead.
        // A re-formation: the world size now and the checkpoint's, and how long ago the checkpoint
        // was written (what the gang trains again plus the time it was down).
        json resume = {{"step", s}, {"incarnation", ctx_.env.incarnation}, {"world", gang_.world()}};
        resume.update(before);
        metrics_->append(json{{"resume", resume}, {"time", seconds_since_start()}});
    }
    // Plan slots consumed into weights that are not the ones resumed from are produced again,
    // whole, and trained in the same steps as before.
    auto rec = ctx_.ledger.recover(ctx_.env.rank, s);
    if (rec.repended || rec.durable)
        log::info("ledger: {} samples of earlier incarnations made durable, {} re-issued", rec.durable, rec.repended);
    if (gang_.place().is_local_leader()) recover_vanished_ranks(s);
    // The plan goes on from the first plan slot not in the checkpoint's steps, per_rank x ranks a
    // step (slot_plan.hpp: with the settings the run had, the grid it had).
    const std::uint64_t base = ctx_.ledger.trained_prefix(s);
    const bool replanned = s > 0 && base != plan_.share(s + 1, 0).first;
    plan_.base_step = s;
    plan_.base_slot = base;
    if (replanned)
        log::info("plan: the steps after {} are planned again from plan slot {} ({} per step): the checkpoint's "
                  "steps were planned with other settings ([data] epochs, [train] tokens_per_step or the drafter "
                  "count changed)", s, base, plan_.per_step());
    retime_schedule();
    const auto [b, e] = plan_.share(s + 1, ctx_.env.rank);
    next_take_ = b < e ? b : plan_.slots;
    ctx_.ledger.set_need(ctx_.env.rank, next_take_);
    log::info("plan: {} slots on this machine, {} per step ({} per rank); resuming at step {} (plan slot {})",
              plan_.slots, plan_.per_step(), plan_.per_rank, s + 1, next_take_);
    return true;
}

// An earlier run had more drafter ranks on this machine ([topology] drafters lowered between runs):
// no rank of this gang recovers theirs. What they trained after step s died with their weights:
// re-issued, and their train logs say so (a resume line bounds their records at s, as each live
// rank's own does), so a rank of that number in a later run appends to a log that is right.
void Drafter::recover_vanished_ranks(std::uint64_t s) {
    const std::uint32_t live = gang_.place().local_world;
    const auto rec = ctx_.ledger.recover_ranks_from(live, s);
    std::uint32_t logs = 0;
    for (const auto& [rank, file] : train_logs_in(ctx_.env.run_dir)) {
        if (rank < live) continue;
        TrainLog(file).resume(ctx_.env.incarnation, s);
        ++logs;
    }
    if (logs || rec.durable || rec.repended)
        log::info("drafter ranks >= {} of an earlier run on this machine: {} samples made durable, {} re-issued; "
                  "their {} train log(s) resume at step {}", live, rec.durable, rec.repended, logs, s);
}

} // namespace hsring::worker
