// The run's ring, ledger and status board (see run_memory.hpp).
#include "supervisor/run_memory.hpp"

#include "hsring/error.hpp"
#include "hsring/train_log.hpp"

#include <unistd.h>

namespace hsring::supervisor {

namespace {

Ring open_ring(const RunMemoryPlan& plan, bool& created) {
    if (Ring::exists(plan.ring_name)) {
        Ring ring = [&] {
            try {
                return Ring::attach(plan.ring_name, &plan.geometry);
            } catch (const Error& e) {
                fail("{}\n  `hsring run --fresh` removes the old ring and its ledger (their READY slots and progress "
                     "are dropped; the checkpoint and train log in {} stay, so nothing trained is lost), or "
                     "give this run another [ring] name", e.what(), plan.files.dir.string());
            }
        }();
        const pid_t creator = ring.creator_pid();
        if (creator != ::getpid() && process_alive(creator))
            fail("ring '{}' was created by process {}, which is still running: is another `hsring run` using it? "
                 "Stop it (hsring stop --run-dir DIR), or give this run another [run] name or [ring] name",
                 plan.ring_name, creator);
        created = false;
        return ring;
    }
    created = true;
    return Ring::create({plan.ring_name, plan.geometry, plan.huge_pages, true});
}

Ledger open_ledger(const RunMemoryPlan& plan, const std::string& name, bool& created, std::uint64_t& marked,
                   const std::function<void(const std::string&)>& say) {
    if (Ledger::exists(name)) {
        created = false;
        return Ledger::attach(name, &plan.info);
    }
    created = true;
    Ledger ledger = Ledger::create(name, plan.info);
    try {
        // A new ledger for a run that already has a checkpoint: what is in those weights is done.
        if (auto step = read_latest_checkpoint(plan.files)) {
            std::vector<Ledger::Trained> trained;
            for (std::uint32_t r = 0; r < plan.drafters; ++r) {
                auto t = surviving_records(plan.files.train_log(r), r, *step);
                trained.insert(trained.end(), t.begin(), t.end());
            }
            ledger.mark_durable(trained);
            marked = trained.size();
            say(fmt::format("new ledger '{}': {} sample passes are in the checkpoint of step {} (train logs of {} "
                            "drafter rank(s) in {}): marked durable", name, marked, *step, plan.drafters,
                            plan.files.dir.string()));
        }
    } catch (...) {
        Ledger::remove(name);
        throw;
    }
    return ledger;
}

StatusBoard open_status(const std::string& name, bool ring_created, bool& created) {
    if (StatusBoard::exists(name)) {
        if (!ring_created) {
            created = false;
            return StatusBoard::attach(name);
        }
        // Its entries describe the processes of a ring that is gone.
        StatusBoard::remove(name);
    }
    created = true;
    return StatusBoard::create(name);
}

// Removes what this start made if a later step fails.
struct Undo {
    const std::string& name;
    bool (*remove)(std::string_view);
    bool armed;
    ~Undo() {
        if (armed) remove(name);
    }
};

} // namespace

RunMemory open_run_memory(const RunMemoryPlan& plan, const std::function<void(const std::string&)>& say) {
    const std::string ledger_name = Ledger::name_for_ring(plan.ring_name);
    const std::string status_name = StatusBoard::name_for_ring(plan.ring_name);
    if (plan.fresh) {
        const std::string removed = remove_run_memory(plan.ring_name);
        if (!removed.empty()) say("--fresh: removed " + removed);
    }

    bool ring_created = false;
    Ring ring = open_ring(plan, ring_created);
    // Whatever fails from here on must not leave a ring or a status board we just made.
    Undo undo_ring{plan.ring_name, &Ring::remove, ring_created};
    bool status_created = false;
    StatusBoard status = open_status(status_name, ring_created, status_created);
    Undo undo_status{status_name, &StatusBoard::remove, status_created};

    if (ring_created && Ledger::exists(ledger_name)) {
        // Its IN_SLOT entries point at slots of a ring that is gone: nobody would ever re-pend
        // them. A new ledger rebuilt from the checkpoint loses nothing trained.
        Ledger::remove(ledger_name);
        say(fmt::format("ring '{}' was gone but its ledger '{}' was not: the ledger is rebuilt from the checkpoint",
                        plan.ring_name, ledger_name));
    }
    bool ledger_created = false;
    std::uint64_t marked = 0;
    Ledger ledger = open_ledger(plan, ledger_name, ledger_created, marked, say);

    // The evaluation board goes with the ring like the status board: a new ring's slots hold no
    // held-out sample of an older board.
    std::optional<EvalBoard> eval;
    const std::string eval_name = EvalBoard::name_for_ring(plan.ring_name);
    bool eval_created = false;
    if (plan.eval) {
        if (EvalBoard::exists(eval_name) && ring_created) EvalBoard::remove(eval_name);
        if (EvalBoard::exists(eval_name)) {
            eval.emplace(EvalBoard::attach(eval_name, plan.eval->samples, plan.eval->fingerprint));
        } else {
            eval.emplace(EvalBoard::create(eval_name, plan.eval->samples, plan.eval->fingerprint));
            eval_created = true;
        }
    }
    Undo undo_eval{eval_name, &EvalBoard::remove, eval_created};

    RunMemory m{std::move(ring), std::move(ledger), std::move(status), std::move(eval)};
    m.ring_created = ring_created;
    m.ledger_created = ledger_created;
    m.status_created = status_created;
    m.marked_durable = marked;
    m.reclaimed = m.ring.reclaim_dead(m.repend());
    m.ring.set_stopping(false);
    undo_ring.armed = false;
    undo_status.armed = false;
    undo_eval.armed = false;
    return m;
}

std::string remove_run_memory(const std::string& ring_name) {
    const std::string ledger_name = Ledger::name_for_ring(ring_name);
    std::string removed;
    if (Ring::remove(ring_name)) removed = "ring '" + ring_name + "'";
    if (Ledger::remove(ledger_name)) removed += (removed.empty() ? "" : ", ") + std::string("ledger '") + ledger_name + "'";
    const std::string status_name = StatusBoard::name_for_ring(ring_name);
    if (StatusBoard::remove(status_name))
        removed += (removed.empty() ? "" : ", ") + std::string("status board '") + status_name + "'";
    const std::string eval_name = EvalBoard::name_for_ring(ring_name);
    if (EvalBoard::remove(eval_name))
        removed += (removed.empty() ? "" : ", ") + std::string("evaluation board '") + eval_name + "'";
    return removed;
}

} // namespace hsring::supervisor
