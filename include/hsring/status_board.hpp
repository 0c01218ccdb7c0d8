#pragma once
// The run's live status board: one entry of counters per worker in a small named shared-memory
// region beside the ring (`<ring>-status`), created, attached and removed with the ring and the
// ledger. Each worker writes only its own entry; the supervisor reads them all (`hsring status`,
// rates, and the incarnations an earlier process used).
//
//  offset 0 ┌──────────────────────────────────────────────────────────────┐
//           │ StatusHeader: magic, version, entry count, creator pid,      │
//           │   run tag (whose board it is: hsring/run_tag.hpp)            │
//  512      ├──────────────────────────────────────────────────────────────┤
//           │ StatsEntry[64]  (128 B each, one writer each)                │
//           │   0 .. 47: target rank r at r;  48 .. 63: drafter rank r at  │
//           │   kDrafterStatsBase + r                                      │
//           └──────────────────────────────────────────────────────────────┘
//
// Thread-safety: every field is a relaxed atomic word with one writer (the worker of that entry),
// so a reader may see a mix of two successive publishes; status tolerates that, and the
// heartbeat tells a stale entry from a live one. Nothing here is a lock: a killed writer leaves
// its last numbers, which the supervisor clears before it starts the next process.
#include "hsring/run_tag.hpp"
#include "hsring/worker_contract.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace hsring {

namespace shm {
class Region;
}

// Live counters of one worker.
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

class StatusBoard {
public:
    static constexpr std::uint32_t kMaxWorkers = hsring::kMaxWorkers;  // include/hsring/worker_contract.hpp
    static constexpr std::uint32_t kDrafterStatsBase = hsring::kDrafterStatsBase;  // drafter r's stats live at 48 + r
    static constexpr std::uint32_t kMaxDrafters = kMaxWorkers - kDrafterStatsBase;
    static_assert(kMaxDrafters >= 16, "room for 16 drafter ranks per machine (data-parallel drafters)");

    // Creates the region (every entry zero) for the run `tag`. Fails if the name exists.
    static StatusBoard create(std::string_view name, const RunTag& tag = {});
    // Attaches; a region of another kind or version is an error that says how to remove it; with
    // `tag`, a board of another run is refused.
    static StatusBoard attach(std::string_view name, const RunTag* tag = nullptr);
    static bool exists(std::string_view name);
    static bool remove(std::string_view name);
    // The status board's shm name for a ring name.
    static std::string name_for_ring(std::string_view ring_name);

    StatusBoard(StatusBoard&&) noexcept;
    StatusBoard& operator=(StatusBoard&&) noexcept;
    ~StatusBoard();

    // `index` < kMaxWorkers. publish() stamps the heartbeat; only the owner of `index` calls it.
    WorkerStats stats(std::uint32_t index) const;
    void publish(std::uint32_t index, const WorkerStats& s);
    // Zeroes an entry (the supervisor, before it starts the entry's next process).
    void clear_stats(std::uint32_t index);

private:
    StatusBoard() = default;

    std::unique_ptr<shm::Region> region_;
};

} // namespace hsring
