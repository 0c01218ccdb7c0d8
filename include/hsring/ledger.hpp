#pragma once
// The sample ledger (invariants 4 and 10, docs/architecture.md): the packer's plan of the run and one 64-bit
// entry per plan slot and per sample per epoch, in a named shared-memory region beside the ring,
// so it survives workers and the supervisor like the ring.
//
// The plan (hsring/slot_plan.hpp) is fixed before the run: plan slot j holds the ledger positions
// [first(j), first(j + 1)), and a drafter rank trains plan slot j in optimizer step
// j / slots_per_step + 1 (PlanSteps: rebased where a gang resumes), whoever produces it and whenever. A plan slot is produced
// and consumed as a whole:
//
//   PENDING --take_slot(ticket)--> IN_SLOT(ticket) --consume_slot(rank, step)--> CONSUMED(rank, step)
//      ^                               |                                            |        |
//      |   target died: the ring slot  |    drafter died: a step after its last     |        | checkpoint
//      +---- with that ticket was -----+--------- checkpoint (recover) -------------+        v  covers step
//      |     reclaimed (repend_ticket)                                                DURABLE(rank, step)
//      +------------- the gang resumed from a checkpoint older than step (recover) ----------+
//
// A sample entry follows its plan slot (IN_SLOT(ticket), CONSUMED(rank, step), DURABLE(rank, step),
// PENDING again), except that a target may mark it REJECTED (its hidden states were not finite):
// REJECTED is final, never trained, and counted apart. A re-issued plan slot is produced again with
// the same samples, so it trains in the same step: a kill never changes what is trained.
//
// Targets take the lowest PENDING plan slot below the window the drafters opened: every local
// drafter rank publishes the next plan slot it needs (need()), and targets stay within
// [min need, min need + window) so the ring (window = its slot count) always has room for the
// slot the drafters wait for. `rank` is a drafter's local rank on this machine.
//
// consume_slot() must name the ticket of the ring slot the plan slot came in: a ring slot that is
// redelivered after its plan slot was re-issued can no longer consume it, so nothing is trained
// twice. Every transition is a CAS; no lock, nothing a dead process holds.
//
// The same region carries the run's done flag; the per-worker live counters are on the status
// board (hsring/status_board.hpp), a region of their own.
#include "hsring/run_tag.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hsring {

namespace shm {
class Region;
}
namespace ledger_detail {
struct LedgerHeader;
}

struct LedgerInfo {
    std::uint64_t data_fingerprint = 0;
    std::uint64_t samples = 0;   // entries per epoch: this machine's share of the data set
    std::uint32_t epochs = 1;
    std::uint64_t seed = 0;
    bool shuffle = true;
    std::uint64_t dataset_samples = 0;   // N of the whole data set (= samples on a single machine)
    std::uint32_t nnodes = 1, node_rank = 0;
    // Tokens of one pass over the whole data set (all machines): the LR schedule's length.
    // Informative: not compared on attach.
    std::uint64_t tokens_per_epoch = 0;
    // Drafter ranks on this machine ([topology] drafters): the ranks whose needs open the window.
    std::uint32_t drafter_ranks = 1;
    std::uint64_t total() const { return samples * epochs; }
};

enum class EntryState : std::uint8_t { Pending = 0, InSlot = 1, Consumed = 2, Durable = 3, Rejected = 4 };
const char* to_string(EntryState s);

// Why a target rejected a sample (the REJECTED entry's payload).
enum class RejectReason : std::uint8_t { NonFiniteHidden = 1 };
std::string describe(RejectReason r);

struct LedgerCounts {
    std::uint64_t pending = 0, in_slot = 0, consumed = 0, durable = 0, rejected = 0;
};

class Ledger {
public:
    // At a fresh ledger for a run that has a checkpoint: these positions are in its weights,
    // trained (or, rejected: seen and not trained) by drafter `rank` in step `step`.
    struct Trained {
        std::uint64_t pos = 0;
        std::uint32_t rank = 0;
        std::uint64_t step = 0;
        bool rejected = false;
    };
    // Creates the region for the run `tag` with the packer's plan (plan_first: the first position
    // of every plan slot, then total(); hsring/slot_plan.hpp): every entry PENDING except
    // `durable` (what the run's checkpoint holds, and the plan slots they complete: DURABLE;
    // REJECTED for rejected records). All or nothing: the name appears only once every mark is
    // made. Fails if the name exists, and if the records cover a plan slot only in part (train
    // logs of another plan).
    static Ledger create(std::string_view name, const LedgerInfo& info, std::span<const std::uint64_t> plan_first,
                         const RunTag& tag = {}, const std::vector<Trained>& durable = {});
    // Attaches; with `expected`, a different data set, epoch count, seed or shuffle is an error;
    // with `tag`, a ledger of another run (run dir, user, data, machine) is refused.
    static Ledger attach(std::string_view name, const LedgerInfo* expected = nullptr, const RunTag* tag = nullptr);
    RunTag tag() const;
    static bool exists(std::string_view name);
    static bool remove(std::string_view name);
    // The ledger's shm name for a ring name.
    static std::string name_for_ring(std::string_view ring_name);
    // The size of the region create() makes for `info` and a plan of `plan_slots` slots (at most
    // one per sample pass: the default is that bound; `hsring plan` counts it).
    static std::uint64_t region_bytes(const LedgerInfo& info, std::uint64_t plan_slots = 0);

    Ledger(Ledger&&) noexcept;
    Ledger& operator=(Ledger&&) noexcept;
    ~Ledger();

    const LedgerInfo& info() const { return info_; }
    std::uint64_t total() const { return info_.total(); }
    std::uint32_t epoch_of(std::uint64_t pos) const { return static_cast<std::uint32_t>(pos / info_.samples); }

    // --- the plan ---
    std::uint64_t plan_slots() const;
    // Plan slot j holds positions [first(j), first(j + 1)); first(plan_slots()) == total().
    std::uint64_t first(std::uint64_t j) const;
    // The positions of every plan slot, in order (first(0) .. first(plan_slots())).
    std::vector<std::uint64_t> plan() const;

    // --- targets ---
    // Takes the lowest PENDING plan slot below `end` for the ring slot with `ticket`: the slot and
    // its samples (except REJECTED ones) become IN_SLOT(ticket). nullopt when none is PENDING there.
    std::optional<std::uint64_t> take_slot(std::uint64_t ticket, std::uint64_t end);
    // IN_SLOT(ticket) -> REJECTED(reason) for a sample of a slot being written.
    bool reject(std::uint64_t pos, std::uint64_t ticket, RejectReason reason);
    // Where targets may take plan slots up to now: min over the local drafter ranks of need().
    std::uint64_t window_base() const;
    // Sleeps until some plan slot may have become PENDING or the window moved (or timeout).
    void wait_pending(std::chrono::milliseconds timeout);

    // --- reclaim (ring's before_free hook) ---
    // The plan slot IN_SLOT(ticket) and its samples -> PENDING; returns how many samples.
    std::uint64_t repend_ticket(std::uint64_t ticket);

    // --- drafter ---
    // The next plan slot drafter `rank` needs and has not taken (plan_slots() when it needs none).
    void set_need(std::uint32_t rank, std::uint64_t j);
    std::uint64_t need(std::uint32_t rank) const;
    // Plan slot j IN_SLOT(ticket) -> CONSUMED(rank, step), and its samples with it (REJECTED ones
    // stay). False when j is not IN_SLOT(ticket) (re-issued meanwhile: the ring slot is stale).
    bool consume_slot(std::uint64_t j, std::uint64_t ticket, std::uint32_t rank, std::uint64_t step);
    // CONSUMED(rank, s <= step) -> DURABLE(rank, s), plan slots and samples, after a checkpoint
    // of `step` was committed. Returns the samples made durable.
    std::uint64_t make_durable(std::uint32_t rank, std::uint64_t step);
    // At a drafter's start from a checkpoint of `step` (0 = none): rank's plan slots CONSUMED in
    // steps <= step -> DURABLE; those CONSUMED or DURABLE in later steps (trained into weights
    // that are not the ones resumed from) -> PENDING with their samples. Lowers the low-water
    // mark to the lowest PENDING plan slot.
    struct Recovery {
        std::uint64_t durable = 0, repended = 0;  // samples
    };
    Recovery recover(std::uint32_t rank, std::uint64_t step);
    // The same for every rank >= first_rank at once: the ranks of an earlier run with more drafters
    // on this machine, which no drafter of this run will recover (a resume with fewer drafters).
    Recovery recover_ranks_from(std::uint32_t first_rank, std::uint64_t step);
    // The drafter ranks on this machine from now on ([topology] drafters changed between runs):
    // whose needs open the targets' window. Only while no worker runs (the supervisor's start);
    // the ranks' needs start at 0 (the window stays shut until each rank sets its own).
    void set_drafter_ranks(std::uint32_t n);
    // How many plan slots from the first are trained in steps <= step (CONSUMED or DURABLE there,
    // by any rank): where a gang resuming from the checkpoint of `step` goes on (PlanSteps' base).
    // The same before and after the ranks' recover().
    std::uint64_t trained_prefix(std::uint64_t step) const;

    // --- status ---
    EntryState state(std::uint64_t pos) const;
    // An entry as a whole: its state, the drafter rank and step of CONSUMED / DURABLE, the reason
    // of REJECTED.
    struct EntryView {
        EntryState state = EntryState::Pending;
        std::uint32_t rank = 0;
        std::uint64_t step = 0;
        RejectReason reason{};
    };
    EntryView view(std::uint64_t pos) const;
    EntryView slot_view(std::uint64_t j) const;  // a plan slot's word (never REJECTED)
    LedgerCounts counts() const;          // scans every entry
    // With no other process attached (the supervisor at start): lowers the low-water mark to the
    // lowest PENDING plan slot (a process killed between a re-issue and the mark left it high).
    void repair();
    bool done() const;
    void set_done();

private:
    Ledger() = default;
    std::chrono::steady_clock::time_point last_sweep_{};  // take_slot()'s sweep for stray PENDING slots
    std::atomic<std::uint64_t>& entry(std::uint64_t pos) const;
    std::atomic<std::uint64_t>& slot(std::uint64_t j) const;
    void lower_low_water(std::uint64_t j);
    void wake_takers();
    Recovery recover_ranks(std::uint32_t begin, std::uint32_t end, std::uint64_t step);
    // Plan slot j (word `expected`) and its samples back to PENDING; returns the samples moved.
    std::uint64_t repend_slot(std::uint64_t j, std::uint64_t expected, bool any_in_slot);
    // Plan slot j CONSUMED (word w) and its samples -> DURABLE; returns the samples moved.
    std::uint64_t durable_slot(std::uint64_t j, std::uint64_t w);

    std::unique_ptr<shm::Region> region_;
    ledger_detail::LedgerHeader* header_ = nullptr;
    const std::uint64_t* first_ = nullptr;
    std::atomic<std::uint64_t>* slots_ = nullptr;
    std::atomic<std::uint64_t>* entries_ = nullptr;
    LedgerInfo info_;
};

// Tests: called at "consume.cas" (a plan slot CONSUMED, its samples not yet) and "repend.cas" (a
// plan slot PENDING, the low-water mark not yet lowered). Default: none.
using LedgerTestHook = void (*)(const char* point);
void set_ledger_test_hook(LedgerTestHook hook);

} // namespace hsring
