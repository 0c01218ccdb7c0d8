// The worker status board: counters round-trip through shared memory, one entry per worker
// (16 drafter ranks fit above the targets), cleared entries read as zero, and a region of
// another kind is refused.
#include "hsring/error.hpp"
#include "hsring/ledger.hpp"
#include "hsring/status_board.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <unistd.h>

#include <atomic>
#include <string>

using namespace hsring;

namespace {

std::string unique_name(const char* tag) {
    static std::atomic<int> counter{0};
    return fmt::format("hsring-test-{}-{}-{}", tag, ::getpid(), counter++);
}

struct TempBoard {
    std::string name = unique_name("status");
    StatusBoard b = StatusBoard::create(name);
    ~TempBoard() { StatusBoard::remove(name); }
};

WorkerStats sample_stats() {
    WorkerStats s;
    s.role = 2;
    s.rank = 0;
    s.pid = 1234;
    s.incarnation = 3;
    s.tokens = 99;
    s.step = 7;
    s.loss = 2.5;
    return s;
}

} // namespace

TEST_CASE("worker stats round-trip through shared memory") {
    TempBoard t;
    t.b.publish(StatusBoard::kDrafterStatsBase, sample_stats());
    StatusBoard other = StatusBoard::attach(t.name);
    WorkerStats r = other.stats(StatusBoard::kDrafterStatsBase);
    CHECK(r.role == 2);
    CHECK(r.pid == 1234);
    CHECK(r.incarnation == 3);
    CHECK(r.tokens == 99);
    CHECK(r.step == 7);
    CHECK(r.loss == 2.5);
    CHECK(r.heartbeat_ns > 0);
    CHECK(other.stats(0).pid == 0);  // another worker's entry is untouched
}

TEST_CASE("every entry has its own words, up to the last drafter rank; a cleared entry reads as zero") {
    static_assert(StatusBoard::kMaxWorkers >= 64);
    static_assert(StatusBoard::kMaxDrafters >= 16);
    TempBoard t;
    for (std::uint32_t i = 0; i < StatusBoard::kMaxWorkers; ++i) {
        WorkerStats s = sample_stats();
        s.pid = static_cast<std::int32_t>(1000 + i);
        t.b.publish(i, s);
    }
    const std::uint32_t last_drafter = StatusBoard::kDrafterStatsBase + StatusBoard::kMaxDrafters - 1;
    CHECK(last_drafter == StatusBoard::kMaxWorkers - 1);
    StatusBoard other = StatusBoard::attach(t.name);
    for (std::uint32_t i = 0; i < StatusBoard::kMaxWorkers; ++i) CHECK(other.stats(i).pid == 1000 + static_cast<int>(i));
    other.clear_stats(last_drafter);
    const WorkerStats z = t.b.stats(last_drafter);
    CHECK(z.pid == 0);
    CHECK(z.incarnation == 0);
    CHECK(z.heartbeat_ns == 0);
    CHECK(t.b.stats(last_drafter - 1).pid == 1000 + static_cast<int>(last_drafter - 1));
}

TEST_CASE("the status board sits beside the ring under its own name and refuses a region of another kind") {
    CHECK(StatusBoard::name_for_ring("hsring-demo") == "hsring-demo-status");
    CHECK(StatusBoard::name_for_ring("hsring-demo") != Ledger::name_for_ring("hsring-demo"));
    const std::string name = unique_name("not-a-board");
    const std::vector<std::uint64_t> plan{0, 4};
    Ledger ledger = Ledger::create(name, LedgerInfo{0xabc, 4, 1, 7, true}, plan);
    CHECK(StatusBoard::exists(name));
    CHECK_THROWS_WITH_AS(StatusBoard::attach(name), doctest::Contains("is not an hsring status board"), Error);
    CHECK(StatusBoard::remove(name));
    CHECK_FALSE(StatusBoard::exists(name));
    CHECK_THROWS_AS(StatusBoard::attach(name), Error);
}

TEST_CASE("a status board of another run is refused with whose it is") {
    const std::string name = unique_name("stag");
    const RunTag mine = RunTag::of("/tmp/run-a", 0x11, 0x22, 0, 1);
    { StatusBoard b = StatusBoard::create(name, mine); }
    CHECK_NOTHROW(StatusBoard::attach(name, &mine));
    const RunTag other = RunTag::of("/tmp/run-b", 0x11, 0x22, 0, 1);
    CHECK_THROWS_WITH_AS(StatusBoard::attach(name, &other),
                         doctest::Contains("belongs to another run: run dir /tmp/run-a (this run: /tmp/run-b)"), Error);
    StatusBoard::remove(name);
}
