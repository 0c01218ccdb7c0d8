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
                return Ring::attach(plan.ring_name, &plan.geometry, &plan.tag);
            } catch (const Error& e) {
                fail("{}\n  `hsring run --fresh` removes the old ring and its ledger (their READY slots and progress "
                     "are dropped; the checkpoint and train log in {} stay, so nothing trained is lost), or "
                     "give this run another [ring] name", e.what(), plan.files.dir.string());
            }
        }();
        // The same run dir, so the same run; but its supervisor may still be alive (another
        // machine mounting the same run dir, or a run.json that lost track of it).
        if (auto users = ring.live_users(); !users.empty())
            fail("ring '{}' is in use by {} (pid {}): is another `hsring run` using it? Stop it (hsring stop "
                 "--run-dir DIR), or give this run another [run] name or [ring] name", plan.ring_name,
                 users[0].name, users[0].owner.pid);
        created = false;
        return ring;
    }
    created = true;
    RingOptions o{plan.ring_name, plan.geometry, plan.huge_pages, true};
    o.tag = plan.tag;
    return Ring::create(o);
}

Ledger open_ledger(const RunMemoryPlan& plan, const std::string& name, bool& created, std::uint64_t& marked,
                   const std::function<void(const std::string&)>& say) {
    if (Ledger::exists(name)) {
        created = false;
        return Ledger::attach(name, &plan.info, &plan.tag);
    }
    created = true;
    Ledger ledger = Ledger::create(name, plan.info, plan.tag);
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

StatusBoard open_status(const std::string& name, const RunTag& tag, bool ring_created, bool& created) {
    if (StatusBoard::exists(name)) {
        if (!ring_created) {
            created = false;
            return StatusBoard::attach(name, &tag);
        }
        // Its entries describe the processes of a ring that is gone.
        StatusBoard::remove(name);
    }
    created = true;
    return StatusBoard::create(name, tag);
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
        check_unused(plan.ring_name, "--fresh");
        const std::string removed = remove_run_memory(plan.ring_name);
        if (!removed.empty()) say("--fresh: removed " + removed);
    }

    bool ring_created = false;
    Ring ring = open_ring(plan, ring_created);
    // Whatever fails from here on must not leave a ring or a status board we just made.
    Undo undo_ring{plan.ring_name, &Ring::remove, ring_created};
    bool status_created = false;
    StatusBoard status = open_status(status_name, plan.tag, ring_created, status_created);
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

    RunMemory m{std::move(ring), std::move(ledger), std::move(status)};
    m.ring_created = ring_created;
    m.ledger_created = ledger_created;
    m.status_created = status_created;
    m.marked_durable = marked;
    Ledger* l = &m.ledger;
    m.reclaimed = m.ring.reclaim_dead([l](std::uint64_t ticket) { l->repend_ticket(ticket); });
    m.ring.set_stopping(false);
    undo_ring.armed = false;
    undo_status.armed = false;
    return m;
}

void check_unused(const std::string& ring_name, std::string_view who) {
    if (!Ring::exists(ring_name)) return;
    std::vector<OwnerInfo> users;
    std::string whose;
    try {
        const Ring ring = Ring::attach(ring_name);
        users = ring.live_users();
        whose = ring.tag().run_dir;
    } catch (const Error& e) {
        // Not readable as a ring of this version: nobody can tell who uses it.
        fail("{}: cannot tell whether a live process uses ring '{}' ({}); if no run uses it, remove it with "
             "`hsring ring rm {} --force`", who, ring_name, e.what(), ring_name);
    }
    if (users.empty()) return;
    std::string list;
    for (const auto& u : users) list += fmt::format("{}{} (pid {})", list.empty() ? "" : ", ", u.name, u.owner.pid);
    fail("{} does not remove ring '{}': live processes use it: {}; it belongs to the run in {}. Stop that run first "
         "(hsring stop --run-dir {}), or give this run another [run] name or [ring] name", who, ring_name, list,
         whose.empty() ? "?" : whose, whose.empty() ? "DIR" : whose);
}

std::string remove_run_memory(const std::string& ring_name) {
    const std::string ledger_name = Ledger::name_for_ring(ring_name);
    std::string removed;
    if (Ring::remove(ring_name)) removed = "ring '" + ring_name + "'";
    if (Ledger::remove(ledger_name)) removed += (removed.empty() ? "" : ", ") + std::string("ledger '") + ledger_name + "'";
    const std::string status_name = StatusBoard::name_for_ring(ring_name);
    if (StatusBoard::remove(status_name))
        removed += (removed.empty() ? "" : ", ") + std::string("status board '") + status_name + "'";
    return removed;
}

} // namespace hsring::supervisor
