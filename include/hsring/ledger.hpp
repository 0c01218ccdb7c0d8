#pragma once
// The sample ledger (DESIGN.md invariant 4): one 64-bit entry per sample per epoch in a named
// shared-memory region beside the ring, so it survives workers and the supervisor like the ring.
//
//   PENDING --take(ticket)--> IN_SLOT(ticket) --consume(rank, step)--> CONSUMED(rank, step)
//      ^                          |                                        |        |
//      |   target died: the slot  |       drafter died: step after its     |        | checkpoint
//      +---- with that ticket ----+------- last checkpoint (recover) ------+        v  covers step
//            was reclaimed                                                       DURABLE
//
// Positions: epoch e's samples are positions [e*N, (e+1)*N), visited in epoch_order(N, seed, e),
// so position p is sample order_e[p % N] of epoch p / N. Targets take positions in order; a
// position sent back to PENDING is found again through the low-water mark (see take()).
//
// A consume() must name the ticket of the slot the sample came in: a slot that is redelivered
// after its samples were re-issued (and possibly taken again) can no longer consume them, so a
// sample is never trained twice. Every transition is a CAS; no lock, nothing a dead process holds.
//
// The same region carries the run's live status: a done flag and per-worker counters, written
// by each worker for its own entry and read by the supervisor (`hsring status`).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hsring {

namespace ring_detail {
class Region;
}
namespace ledger_detail {
struct LedgerHeader;
}

struct LedgerInfo {
    std::uint64_t data_fingerprint = 0;
    std::uint64_t samples = 0;   // N per epoch
    std::uint32_t epochs = 1;
    std::uint64_t seed = 0;
    bool shuffle = true;
    std::uint64_t tokens_per_epoch = 0;  // informative (LR schedule length); not compared on attach
    std::uint64_t total() const { return samples * epochs; }
};

enum class EntryState : std::uint8_t { Pending = 0, InSlot = 1, Consumed = 2, Durable = 3 };

struct LedgerCounts {
    std::uint64_t pending = 0, in_slot = 0, consumed = 0, durable = 0;
};

// Live counters of one worker (relaxed atomics in shared memory; one writer each).
struct WorkerStats {
    std::uint32_t role = 0;   // 1 target, 2 drafter
    std::uint32_t rank = 0;
    std::int32_t pid = 0;
    std::uint32_t incarnation = 0;
    std::uint64_t slots = 0, samples = 0, tokens = 0;  // produced (target) / trained (drafter)
    std::uint64_t busy_ns = 0, wait_ns = 0;            // computing / waiting for data or a slot
    std::uint64_t step = 0;
    double loss = 0, accept_len = 0;
    std::uint64_t heartbeat_ns = 0;                    // CLOCK_REALTIME of the last update
};

class Ledger {
public:
    static constexpr std::uint32_t kMaxWorkers = 64;
    static constexpr std::uint32_t kDrafterStatsBase = 48;  // drafter r's stats live at 48 + r

    // Creates the region (all PENDING). Fails if the name exists.
    static Ledger create(std::string_view name, const LedgerInfo& info);
    // Attaches; with `expected`, a different data set, epoch count, seed or shuffle is an error.
    static Ledger attach(std::string_view name, const LedgerInfo* expected = nullptr);
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
    // CONSUMED(rank, s <= step) -> DURABLE, after a checkpoint of `step` was committed.
    std::uint64_t make_durable(std::uint32_t rank, std::uint64_t step);
    // At a drafter's start from a checkpoint of `step` (0 = none): CONSUMED(rank, s <= step) ->
    // DURABLE, CONSUMED(rank, s > step) -> PENDING (trained into weights that died).
    struct Recovery {
        std::uint64_t durable = 0, repended = 0;
    };
    Recovery recover(std::uint32_t rank, std::uint64_t step);
    // At a fresh ledger for a run that has a checkpoint: these positions are in its weights.
    void mark_durable(const std::vector<std::uint64_t>& positions);

    // --- status ---
    EntryState state(std::uint64_t pos) const;
    LedgerCounts counts() const;          // scans every entry
    std::uint64_t consumed_or_durable() const;  // O(1) counter
    bool done() const;
    void set_done();
    WorkerStats stats(std::uint32_t index) const;
    void publish(std::uint32_t index, const WorkerStats& s);
    void clear_stats(std::uint32_t index);

private:
    Ledger() = default;
    std::atomic<std::uint64_t>& entry(std::uint64_t pos) const;
    void lower_low_water(std::uint64_t pos);
    bool to_pending(std::uint64_t pos, std::uint64_t expected_entry);

    std::unique_ptr<ring_detail::Region> region_;
    ledger_detail::LedgerHeader* header_ = nullptr;
    LedgerInfo info_;
};

} // namespace hsring
