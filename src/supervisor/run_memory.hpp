#pragma once
// The run's shared memory: the ring, the ledger and the status board beside it, created by the
// supervisor or re-attached after a supervisor restart (the READY slots and the ledger's
// progress survive).
//
//   --fresh                     remove all three first, unless a live process uses the ring
//   ring exists                 attach; another layout, or a ring of another run (its run tag:
//                               run dir, user, data set, machine) is refused (the message says
//                               whose it is, --fresh, hsring ring rm); so is a ring a live process uses
//   ring new, ledger exists     the ledger's IN_SLOT entries name slots that are gone: replaced
//   ledger exists               attach; another data set / epochs / seed / run is refused. Its
//                               trained marks must be what RUN_DIR/checkpoints/latest holds (every
//                               local drafter's train log replayed to that step): if they are not
//                               (latest lost or set back, a half-built ledger), it is rebuilt
//   ledger new                  all PENDING; if RUN_DIR/checkpoints/latest exists, the positions
//                               in that checkpoint's weights (every local drafter's train log)
//                               are DURABLE; the name appears only once every mark is made
//   status board                goes with the ring: new with a new ring (an old one is replaced),
//   evaluation board            else attached (created if missing); the evaluation board only
//                               with [data] eval_path (another held-out set is refused)
// Then the slots of dead owners are reclaimed (their samples re-pended) and a stopping flag left
// by an earlier stop is cleared. A failure leaves nothing new behind.
#include "hsring/eval_board.hpp"
#include "hsring/ledger.hpp"
#include "hsring/ring.hpp"
#include "hsring/status_board.hpp"
#include "supervisor/run_files.hpp"

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hsring::supervisor {

struct RunMemoryPlan {
    std::string ring_name;
    RunTag tag;                  // this run's: every object is made with it and must carry it
    RingGeometry geometry;
    HugePages huge_pages = HugePages::Auto;
    LedgerInfo info;
    // The packer's plan of this machine's share (hsring/slot_plan.hpp): a new ledger is made with
    // it, an attached one must hold the same.
    std::vector<std::uint64_t> plan_first;
    bool fresh = false;
    RunFiles files;
    std::uint32_t drafters = 1;  // local drafter ranks: their train logs seed a new ledger
    // [data] eval_path: this machine's share of the held-out set (its size and fingerprint).
    struct Eval {
        std::uint64_t samples = 0, fingerprint = 0;
    };
    std::optional<Eval> eval;
};

struct RunMemory {
    Ring ring;
    Ledger ledger;
    StatusBoard status;
    std::optional<EvalBoard> eval;     // with [data] eval_path
    bool ring_created = false;
    bool ledger_created = false;
    bool status_created = false;
    std::uint64_t marked_durable = 0;  // positions a new ledger took from the checkpoint
    ReclaimResult reclaimed;           // what reclaim_dead undid at start

    // A reclaimed WRITING slot's samples go back: training samples in the ledger, held-out ones
    // on the evaluation board (the ring's before_free hook).
    std::function<void(std::uint64_t)> repend() {
        return [this](std::uint64_t ticket) {
            ledger.repend_ticket(ticket);
            if (eval) eval->repend_ticket(ticket);
        };
    }
};

// `say` receives progress messages for the console. Throws hsring::Error.
RunMemory open_run_memory(const RunMemoryPlan& plan, const std::function<void(const std::string&)>& say);

// Throws (naming them and the run they belong to) if live processes other than this one use
// the ring `ring_name`; `who` starts the message ("--fresh", "hsring ring rm").
void check_unused(const std::string& ring_name, std::string_view who);

// Removes the ring, its ledger, its status board and its evaluation board; returns what was
// removed ("ring X, ledger Y, status board Z, evaluation board W").
std::string remove_run_memory(const std::string& ring_name);

} // namespace hsring::supervisor
