#pragma once
// The sample ledger (DESIGN.md invariant 4): one 64-bit entry per sample per epoch in a named
// shared-memory region beside the ring, so it survives workers and the supervisor like the ring.
//
//   PENDING --take(ticket)--> IN_SLOT(ticket) --consume(rank, step)--> CONSUMED(rank, step)
//      ^                          |                                        |        |
//      |   target died: the slot  |       drafter died: step after its     |        | checkpoint
//      +---- with that ticket ----+------- last checkpoint (recover) ------+        v  covers step
//      |     was reclaimed                                                  DURABLE(rank, step)
//      +------------ the gang resumed from a checkpoint older than step (recover) ------+
//
// Positions: a machine's ledger holds its share of the data set (data::ShardOrder): epoch e is
// positions [e*S, (e+1)*S) for a share of S samples (S = N on a single machine), visited in the
// epoch's order. Targets take positions in order; a position sent back to PENDING is found again
// through the low-water mark (see take()). `rank` is the drafter's local rank on this machine.
//
// A consume() must name the ticket of the slot the sample came in: a slot that is redelivered
// after its samples were re-issued (and possibly taken again) can no longer consume them, so a
// sample is never trained twice. Every transition is a CAS; no lock, nothing a dead process holds.
//
// The same region carries the run's done flag and the trained-passes counter; the per-worker
// live counters are on the status board (hsring/status_board.hpp), a region of their own.
#include "hsring/run_tag.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
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
    std::uint64_t total() const { return samples * epochs; }
};

enum class EntryState : std::uint8_t { Pending = 0, InSlot = 1, Consumed = 2, Durable = 3 };

struct LedgerCounts {
    std::uint64_t pending = 0, in_slot = 0, consumed = 0, durable = 0;
};

class Ledger {
public:
    // At a fresh ledger for a run that has a checkpoint: these positions are in its weights,
    // trained by drafter `rank` into step `step`.
    struct Trained {
        std::uint64_t pos = 0;
        std::uint32_t rank = 0;
        std::uint64_t step = 0;
    };
    // Creates the region for the run `tag`: every entry PENDING except `durable` (what the run's
    // checkpoint holds: DURABLE). All or nothing: the name appears only once every mark is made.
    // Fails if the name exists.
    static Ledger create(std::string_view name, const LedgerInfo& info, const RunTag& tag = {},
                         const std::vector<Trained>& durable = {});
    // Attaches; with `expected`, a different data set, epoch count, seed or shuffle is an error;
    // with `tag`, a ledger of another run (run dir, user, data, machine) is refused.
    static Ledger attach(std::string_view name, const LedgerInfo* expected = nullptr, const RunTag* tag = nullptr);
    RunTag tag() const;
    static bool exists(std::string_view name);
    static bool remove(std::string_view name);
    // The ledger's shm name for a ring name.
    static std::string name_for_ring(std::string_view ring_name);
    // The size of the region create() makes for `info` (`hsring plan` counts it).
    static std::uint64_t region_bytes(const LedgerInfo& info);

    Ledger(Ledger&&) noexcept;
    Ledger& operator=(Ledger&&) noexcept;
    ~Ledger();

    const LedgerInfo& info() const { return info_; }
    std::uint64_t total() const { return info_.total(); }
    std::uint32_t epoch_of(std::uint64_t pos) const { return static_cast<std::uint32_t>(pos / info_.samples); }

    // --- targets ---
    // Takes the lowest available PENDING position for the slot with `ticket`; nullopt when none is
    // PENDING right now (all taken, or the data is exhausted).
    std::optional<std::uint64_t> take(std::uint64_t ticket);
    // IN_SLOT(ticket) -> PENDING for a position taken but not written (it did not fit).
    bool untake(std::uint64_t pos, std::uint64_t ticket);
    // Sleeps until some entry may have become PENDING again (or timeout).
    void wait_pending(std::chrono::milliseconds timeout);

    // --- reclaim (ring's before_free hook) ---
    // IN_SLOT(ticket) -> PENDING for every position of a reclaimed slot; returns how many.
    std::uint64_t repend_ticket(std::uint64_t ticket);

    // --- drafter ---
    // IN_SLOT(ticket) -> CONSUMED(rank, step); false if the entry is not IN_SLOT(ticket).
    bool consume(std::uint64_t pos, std::uint64_t ticket, std::uint32_t rank, std::uint64_t step);
    // CONSUMED(rank, s <= step) -> DURABLE(rank, s), after a checkpoint of `step` was committed.
    std::uint64_t make_durable(std::uint32_t rank, std::uint64_t step);
    // At a drafter's start from a checkpoint of `step` (0 = none): CONSUMED(rank, s <= step) ->
    // DURABLE, CONSUMED(rank, s > step) and DURABLE(rank, s > step) -> PENDING (trained into
    // weights that are not the ones resumed from). Scans every entry: recounts `rank`'s counter
    // and lowers the low-water mark to the lowest PENDING entry.
    struct Recovery {
        std::uint64_t durable = 0, repended = 0;
    };
    Recovery recover(std::uint32_t rank, std::uint64_t step);

    // --- status ---
    EntryState state(std::uint64_t pos) const;
    // An entry as a whole: its state, and the drafter rank and step of CONSUMED / DURABLE.
    struct EntryView {
        EntryState state = EntryState::Pending;
        std::uint32_t rank = 0;
        std::uint64_t step = 0;
    };
    EntryView view(std::uint64_t pos) const;
    LedgerCounts counts() const;          // scans every entry
    std::uint64_t consumed_or_durable() const;  // sum of the per-rank counters (exact after recover/repair)
    // With no other process attached (the supervisor at start): recounts every rank's counter and
    // lowers the low-water mark to the lowest PENDING entry, undoing what a process killed between
    // an entry's CAS and its bookkeeping left behind.
    void repair();
    bool done() const;
    void set_done();

private:
    Ledger() = default;
    std::chrono::steady_clock::time_point last_sweep_{};  // take()'s sweep for stray PENDING entries
    std::atomic<std::uint64_t>& entry(std::uint64_t pos) const;
    void lower_low_water(std::uint64_t pos);
    bool to_pending(std::uint64_t pos, std::uint64_t expected_entry);

    std::unique_ptr<shm::Region> region_;
    ledger_detail::LedgerHeader* header_ = nullptr;
    LedgerInfo info_;
};

// Tests: called at "consume.cas" (an entry CONSUMED, its counter not yet counted) and
// "repend.cas" (an entry PENDING, the low-water mark not yet lowered). Default: none.
using LedgerTestHook = void (*)(const char* point);
void set_ledger_test_hook(LedgerTestHook hook);

} // namespace hsring
