// The run's ring, ledger and status board (see run_memory.hpp).
#include "supervisor/run_memory.hpp"

#include "hsring/error.hpp"
#include "hsring/train_log.hpp"

#include <unistd.h>

#include <optional>
#include <vector>

namespace hsring::supervisor {

namespace {

// An existing ring that this run cannot attach (another layout, another run's) is suggested to
// `--fresh` only when --fresh can remove it: a ring that a live process uses, or one that cannot
// be read (another user's, damaged, another version), is refused by --fresh too (check_unused).
// So who uses the ring is asked first, and the hint fits what was found.
void refuse_ring_in_use(const RunMemoryPlan& plan) {
    const std::string& name = plan.ring_name;
    std::vector<OwnerInfo> users;
    RunTag found;
    try {
        const Ring probe = Ring::attach(name);
        users = probe.live_users();
        found = probe.tag();  // its layout hash too: another layout is "another run" here
    } catch (const Error& e) {
        fail("{}\n  (`hsring run --fresh` cannot remove this ring either: it removes only a ring that it can read and "
             "that no live process uses)", e.what());
    }
    if (users.empty()) return;
    std::string list;
    for (const auto& u : users) list += fmt::format("{}{} (pid {})", list.empty() ? "" : ", ", u.name, u.owner.pid);
    const std::string dir = found.run_dir.empty() ? "DIR" : found.run_dir;
    const std::string other = plan.tag.differences(found);
    if (other.empty())
        // The same run dir, so the same run; but its supervisor may still be alive (another
        // machine mounting the same run dir, or a run.json that lost track of it).
        fail("ring '{}' is in use by {}: is another `hsring run` using it? Stop it (hsring stop --run-dir {}), or "
             "give this run another [run] name or [ring] name", name, list, dir);
    fail("ring '{}' belongs to another run that is still running ({}); live processes use it: {}. Stop that run "
         "first (hsring stop --run-dir {}; neither `hsring run --fresh` nor `hsring ring rm` removes a ring in use), "
         "or, to run both at once, give this run another [run] name or [ring] name", name, other, list, dir);
}

Ring open_ring(const RunMemoryPlan& plan, bool& created) {
    if (Ring::exists(plan.ring_name)) {
        refuse_ring_in_use(plan);
        // Nobody uses it: --fresh can remove it.
        Ring ring = [&] {
            try {
                return Ring::attach(plan.ring_name, &plan.geometry, &plan.tag);
            } catch (const Error& e) {
                fail("{}\n  `hsring run --fresh` removes the old ring and its ledger (their READY slots and progress "
                     "are dropped; the checkpoint and train log in {} stay, so nothing trained is lost), or "
                     "give this run another [ring] name", e.what(), plan.files.dir.string());
            }
        }();
        created = false;
        return ring;
    }
    created = true;
    RingOptions o{plan.ring_name, plan.geometry, plan.huge_pages, true};
    o.tag = plan.tag;
    return Ring::create(o);
}

// What the run's checkpoint holds: every local drafter rank's train records that are in the
// weights of checkpoints/latest (none without a checkpoint), the ranks of earlier runs with more
// drafters on this machine included.
struct CheckpointContents {
    std::optional<std::uint64_t> step;
    std::vector<Ledger::Trained> trained;
    std::uint32_t logs = 0;  // train logs read (ranks of earlier runs with more drafters included)
};

CheckpointContents read_checkpoint_contents(const RunMemoryPlan& plan) {
    CheckpointContents c;
    c.step = read_latest_checkpoint(plan.files);
    if (!c.step) return c;
    for (const auto& [r, log] : train_logs_in(plan.files.dir)) {
        auto t = surviving_records(log, r, *c.step);
        ++c.logs;
        c.trained.insert(c.trained.end(), t.begin(), t.end());
    }
    return c;
}

// "" when the ledger's trained marks are what the checkpoint holds (invariant 8, docs/architecture.md), else
// what differs. CONSUMED after the checkpoint's step is fine: the drafter's recover() re-issues it.
std::string disagreement(const Ledger& l, const CheckpointContents& c) {
    constexpr std::uint64_t kNone = ~std::uint64_t{0}, kRejected = kNone - 1;
    const std::uint64_t total = l.total(), step = c.step.value_or(0);
    std::vector<std::uint64_t> expect(total, kNone);
    std::uint64_t beyond = 0, doubled = 0;
    for (const auto& t : c.trained) {
        if (t.pos >= total) {
            ++beyond;
            continue;
        }
        if (expect[t.pos] != kNone) ++doubled;
        expect[t.pos] = t.rejected ? kRejected : (std::uint64_t{t.rank} << 48) | t.step;
    }
    std::uint64_t extra = 0, missing = 0, other = 0;
    for (std::uint64_t p = 0; p < total; ++p) {
        const Ledger::EntryView v = l.view(p);
        const std::uint64_t key = (std::uint64_t{v.rank} << 48) | v.step;
        switch (v.state) {
        case EntryState::Rejected:
            // Final: the checkpoint may or may not have seen its slot yet.
            if (expect[p] != kNone && expect[p] != kRejected) ++other;
            break;
        case EntryState::Durable:
            if (expect[p] == kNone) ++extra;
            else if (expect[p] == kRejected) ++other;
            else if (expect[p] != key) ++other;
            break;
        case EntryState::Consumed:
            if (v.step <= step ? expect[p] != key : expect[p] != kNone) ++(expect[p] == kNone ? extra : other);
            break;
        case EntryState::Pending:
        case EntryState::InSlot:
            if (expect[p] != kNone) ++missing;
            break;
        }
    }
    std::string why;
    auto add = [&](std::uint64_t n, const char* text) {
        if (n) why += fmt::format("{}{} {}", why.empty() ? "" : "; ", n, text);
    };
    add(extra, "sample passes are marked trained in the ledger but are not in the checkpoint's weights (was "
               "checkpoints/latest removed or set back?)");
    add(missing, "sample passes in the checkpoint's weights are not marked trained in the ledger");
    add(other, "sample passes are marked trained by another drafter rank, into another step, or rejected, other than "
               "the train logs say");
    add(doubled, "positions appear twice in the checkpoint's train records");
    add(beyond, "train records name positions beyond this ledger");
    return why;
}

Ledger open_ledger(const RunMemoryPlan& plan, const std::string& name, bool& created, std::uint64_t& marked,
                   const std::function<void(const std::string&)>& say) {
    const CheckpointContents ck = read_checkpoint_contents(plan);
    const std::string at = ck.step ? fmt::format("the checkpoint of step {}", *ck.step) : std::string("no checkpoint");
    if (Ledger::exists(name)) {
        Ledger attached = Ledger::attach(name, &plan.info, &plan.tag);
        // The same data, layout and settings make the same plan; anything else is another run's.
        const std::string why = attached.plan() != plan.plan_first
                                    ? std::string("it holds another packing plan than this run's data and settings make")
                                    : disagreement(attached, ck);
        if (why.empty()) {
            created = false;
            const std::uint32_t had = attached.info().drafter_ranks;
            if (had != plan.info.drafter_ranks) {
                // [topology] drafters changed between runs (resume_rules: re-planned): the new ranks'
                // needs open the targets' window; the drafters recover the old ranks' plan slots.
                attached.set_drafter_ranks(plan.info.drafter_ranks);
                say(fmt::format("ledger '{}': {} drafter rank(s) on this machine, {} before", name,
                                plan.info.drafter_ranks, had));
            }
            return attached;
        }
        // Never train on a ledger that disagrees with the weights it would resume: it would skip
        // samples that are not in them, or train twice what is. The checkpoint and the train logs
        // are the durable truth; the ring's READY slots stay, their samples are produced again.
        say(fmt::format("ledger '{}' does not agree with {} in {}: {}. The ledger is rebuilt from the checkpoint "
                        "and the train logs", name, at, plan.files.dir.string(), why));
        { Ledger gone = std::move(attached); }
        Ledger::remove(name);
    }
    created = true;
    Ledger ledger = Ledger::create(name, plan.info, plan.plan_first, plan.tag, ck.trained);
    marked = ck.trained.size();
    if (ck.step)
        say(fmt::format("new ledger '{}': {} sample passes are in the checkpoint of step {} (train logs of {} "
                        "drafter rank(s) in {}): marked durable", name, marked, *ck.step, ck.logs,
                        plan.files.dir.string()));
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
    // No worker is attached yet: undo what a process killed between an entry's CAS and its
    // bookkeeping left (a PENDING plan slot above the low-water mark).
    if (!ledger_created) ledger.repair();

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
        // Its owner: a ring of another user cannot be removed by this one (sticky /dev/shm).
        fail("{}: cannot tell whether a live process uses ring '{}' ({}); if no run uses it, its owner can remove it "
             "with `hsring ring rm {} --force`", who, ring_name, e.what(), ring_name);
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
    const std::string eval_name = EvalBoard::name_for_ring(ring_name);
    if (EvalBoard::remove(eval_name))
        removed += (removed.empty() ? "" : ", ") + std::string("evaluation board '") + eval_name + "'";
    return removed;
}

} // namespace hsring::supervisor
