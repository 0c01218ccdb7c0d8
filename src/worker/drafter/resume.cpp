// The drafter gang's start (see worker/drafter_loop.hpp): the step every rank resumes from, the
// master's state sent to every rank, what the ledger re-issues.
#include "worker/drafter/drafter.hpp"

#include "hsring/error.hpp"
#include "hsring/fault.hpp"
#include "hsring/log.hpp"

namespace hsring::worker {

using nlohmann::json;

void Drafter::restore() {
    // Resume from the oldest of the machines' latest checkpoints: the master keeps the last two,
    // and a machine that died between the master's commit and its own marker is one behind.
    CheckpointStore& store = checkpoints_.store();
    const std::uint64_t mine = store.latest_step();
    double v = -static_cast<double>(mine);
    gang_.allreduce_max({&v, 1});
    fault::point("restore");  // HSRING_FAULT: the gang formed, the state not yet sent
    const auto s = static_cast<std::uint64_t>(-v);
    // tokens_done, warmup_end_tokens, samples_done (from the master), held-out samples (each machine's)
    double state[4] = {0, 0, 0, 0};
    if (gang_.place().is_master()) {
        if (s) {
            const auto dir = store.dir_of(s);
            if (!std::filesystem::is_directory(dir / "drafter") && ctx_.cfg.run.mode == RunMode::Train)
                fail("the gang resumes from step {} (the oldest latest checkpoint of its machines), but {} holds no "
                     "weights of that step: the master's run directory lost them", s, dir.string());
            compute_.restore(&dir);
            const json st = json::parse(store.read_file(s, "state.json").value_or(""), nullptr, false);
            if (st.is_object()) {
                state[0] = st.value("tokens_total", 0.0);
                state[1] = st.value("warmup_end_tokens", 0.0);
                state[2] = st.value("samples_total", 0.0);
            }
            log::info("resumed from checkpoint step {} ({})", s, dir.string());
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
    assign_step_ = s + 1;
    log_.resume(ctx_.env.incarnation, s);
    // Samples consumed into weights that are not the ones resumed from are produced again.
    auto rec = ctx_.ledger.recover(ctx_.env.rank, s);
    if (rec.repended || rec.durable)
        log::info("ledger: {} samples of earlier incarnations made durable, {} re-issued", rec.durable, rec.repended);
}

} // namespace hsring::worker
