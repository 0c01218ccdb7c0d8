// The sample ledger and the train log: the plan's slots taken whole and in order within the
// window, re-issue, tickets that protect against double training, recovery after a drafter death,
// rejected samples, concurrent takers, and lineage verification.
#include "hsring/error.hpp"
#include "hsring/ledger.hpp"
#include "hsring/train_log.hpp"

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <vector>

using namespace hsring;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

LedgerInfo info(std::uint64_t n, std::uint32_t epochs = 1, std::uint32_t ranks = 1) {
    LedgerInfo i{0xabc, n, epochs, 7, true};
    i.drafter_ranks = ranks;
    return i;
}

// A plan of slots of `per` positions each (the last one shorter).
std::vector<std::uint64_t> plan_of(std::uint64_t total, std::uint64_t per) {
    std::vector<std::uint64_t> first;
    for (std::uint64_t p = 0; p < total; p += per) first.push_back(p);
    first.push_back(total);
    return first;
}

struct TempLedger {
    std::string name;
    Ledger l;
    explicit TempLedger(LedgerInfo info, std::uint64_t per_slot = 1, const std::vector<Ledger::Trained>& durable = {})
        : name("hsring-test-ledger-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++)),
          l(Ledger::create(name, info, plan_of(info.total(), per_slot), {}, durable)) {}
    ~TempLedger() { Ledger::remove(name); }
    static std::atomic<int>& counter() {
        static std::atomic<int> c{0};
        return c;
    }
};

constexpr std::uint64_t kAll = ~std::uint64_t{0};

} // namespace

TEST_CASE("targets take plan slots whole, lowest first, within the window") {
    TempLedger t(info(10), 3);  // plan slots: [0,3) [3,6) [6,9) [9,10)
    Ledger& l = t.l;
    REQUIRE(l.plan_slots() == 4);
    CHECK(l.first(1) == 3);
    CHECK(l.first(4) == 10);
    CHECK(l.take_slot(1, 2) == 0u);
    for (std::uint64_t p = 0; p < 3; ++p) CHECK(l.state(p) == EntryState::InSlot);
    CHECK(l.state(3) == EntryState::Pending);
    CHECK(l.take_slot(2, 2) == 1u);
    CHECK_FALSE(l.take_slot(3, 2));  // slot 2 is beyond the window [0, 2)
    CHECK(l.take_slot(3, kAll) == 2u);
    CHECK(l.take_slot(4, kAll) == 3u);
    CHECK_FALSE(l.take_slot(5, kAll));
    CHECK(l.counts().in_slot == 10);
}

TEST_CASE("the drafters' needs open the window; a re-issued slot is taken again before later ones") {
    TempLedger t(info(8, 1, 2), 2);  // 4 plan slots, 2 drafter ranks
    Ledger& l = t.l;
    CHECK(l.window_base() == 0);
    l.set_need(0, 2);
    CHECK(l.window_base() == 0);  // rank 1 still needs slot 0
    l.set_need(1, 3);
    CHECK(l.window_base() == 2);
    REQUIRE(l.take_slot(10, kAll) == 0u);
    REQUIRE(l.take_slot(11, kAll) == 1u);
    // Slot 10's writer died: its plan slot goes back whole and is the next one taken.
    CHECK(l.repend_ticket(10) == 2);
    CHECK(l.slot_view(0).state == EntryState::Pending);
    CHECK(l.take_slot(12, kAll) == 0u);
    CHECK(l.take_slot(12, kAll) == 2u);
}

TEST_CASE("consume needs the ticket of the ring slot the plan slot came in") {
    TempLedger t(info(4), 2);
    Ledger& l = t.l;
    REQUIRE(l.take_slot(10, kAll) == 0u);
    CHECK(l.consume_slot(0, 10, 0, 1));
    CHECK_FALSE(l.consume_slot(0, 10, 0, 1));  // no double consumption
    CHECK(l.state(1) == EntryState::Consumed);
    CHECK(l.view(1).step == 1);
    // Slot 11's writer died after its samples were re-issued and taken again by slot 12: a late
    // redelivery of 11 cannot train them.
    REQUIRE(l.take_slot(11, kAll) == 1u);
    CHECK(l.repend_ticket(11) == 2);
    REQUIRE(l.take_slot(12, kAll) == 1u);
    CHECK_FALSE(l.consume_slot(1, 11, 0, 1));
    CHECK(l.consume_slot(1, 12, 0, 1));
}

TEST_CASE("a checkpoint makes consumed slots durable; a drafter death re-issues the later ones whole") {
    TempLedger t(info(6), 1);
    Ledger& l = t.l;
    for (std::uint64_t j = 0; j < 6; ++j) {
        REQUIRE(l.take_slot(j + 1, kAll) == j);
        REQUIRE(l.consume_slot(j, j + 1, 0, j / 2 + 1));  // steps 1,1,2,2,3,3
    }
    CHECK(l.make_durable(0, 1) == 2);
    CHECK(l.slot_view(1).state == EntryState::Durable);
    // Where a gang resuming from step k goes on: consumed or durable in steps <= k, any rank.
    CHECK(l.trained_prefix(0) == 0);
    CHECK(l.trained_prefix(1) == 2);
    CHECK(l.trained_prefix(2) == 4);
    CHECK(l.trained_prefix(9) == 6);
    // The drafter dies; its checkpoint was step 2: step 3's plan slots are produced again.
    auto r = l.recover(0, 2);
    CHECK(l.trained_prefix(2) == 4);  // the same after the recovery
    CHECK(l.trained_prefix(3) == 4);
    CHECK(r.durable == 2);
    CHECK(r.repended == 2);
    LedgerCounts c = l.counts();
    CHECK(c.durable == 4);
    CHECK(c.pending == 2);
    CHECK(l.take_slot(9, kAll) == 4u);
    CHECK(l.take_slot(9, kAll) == 5u);
    CHECK_FALSE(l.take_slot(9, kAll));
}

TEST_CASE("fewer drafter ranks than the ledger's run had: the gone ranks' later slots are re-issued, their needs ignored") {
    TempLedger t(info(8, 1, 3), 1);
    Ledger& l = t.l;
    // Ranks 0, 1, 2 train slots j in step j / 3 + 1, rank j % 3 (slots 0..7: steps 1, 1, 1, 2, 2, 2, 3, 3).
    for (std::uint64_t j = 0; j < 8; ++j) {
        REQUIRE(l.take_slot(j + 1, kAll) == j);
        REQUIRE(l.consume_slot(j, j + 1, static_cast<std::uint32_t>(j % 3), j / 3 + 1));
    }
    // The run comes back with one rank from the checkpoint of step 1.
    l.set_drafter_ranks(1);
    CHECK(l.info().drafter_ranks == 1);
    l.set_need(0, 8);
    CHECK(l.window_base() == 8);  // ranks 1 and 2 hold the window no longer
    const auto own = l.recover(0, 1);
    const auto gone = l.recover_ranks_from(1, 1);
    CHECK(own.durable == 1);     // slot 0
    CHECK(own.repended == 2);    // slots 3, 6
    CHECK(gone.durable == 2);    // slots 1, 2
    CHECK(gone.repended == 3);   // slots 4, 5, 7
    CHECK(l.trained_prefix(1) == 3);
    const LedgerCounts c = l.counts();
    CHECK(c.durable == 3);
    CHECK(c.pending == 5);
    CHECK(c.consumed == 0);
    CHECK_THROWS_AS(l.set_drafter_ranks(0), Error);
}

TEST_CASE("a rejected sample stays rejected: never trained, never re-issued, its slot produced again whole") {
    TempLedger t(info(4), 2);
    Ledger& l = t.l;
    REQUIRE(l.take_slot(5, kAll) == 0u);
    CHECK(l.reject(1, 5, RejectReason::NonFiniteHidden));
    CHECK_FALSE(l.reject(1, 5, RejectReason::NonFiniteHidden));
    CHECK(l.view(1).reason == RejectReason::NonFiniteHidden);
    // The writer dies before its commit: the plan slot comes back, the rejection stays.
    CHECK(l.repend_ticket(5) == 1);
    CHECK(l.state(1) == EntryState::Rejected);
    REQUIRE(l.take_slot(6, kAll) == 0u);
    CHECK(l.state(0) == EntryState::InSlot);
    CHECK(l.state(1) == EntryState::Rejected);
    REQUIRE(l.consume_slot(0, 6, 0, 1));
    CHECK(l.state(1) == EntryState::Rejected);
    CHECK(l.recover(0, 0).repended == 1);  // the drafter resumes before step 1: only sample 0 goes back
    CHECK(l.counts().rejected == 1);
}

TEST_CASE("concurrent takers, re-issues and consumers account for every position exactly once") {
    constexpr std::uint64_t kN = 20000;
    TempLedger t(info(kN), 5);
    Ledger& l = t.l;
    std::atomic<std::uint64_t> next_ticket{1}, slots_done{0};
    const std::uint64_t slots = l.plan_slots();
    std::mutex m;
    std::vector<int> consumed(kN, 0);
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k) {
        threads.emplace_back([&, k] {
            std::mt19937 rng(static_cast<unsigned>(k));
            for (;;) {
                const std::uint64_t ticket = next_ticket++;
                const auto j = l.take_slot(ticket, kAll);
                if (!j) {
                    if (slots_done == slots) return;
                    std::this_thread::yield();
                    continue;
                }
                if (rng() % 5 == 0) {  // this "writer died": its slot is reclaimed
                    CHECK(l.repend_ticket(ticket) == l.first(*j + 1) - l.first(*j));
                    continue;
                }
                REQUIRE(l.consume_slot(*j, ticket, 0, 1));
                ++slots_done;
                std::lock_guard g(m);
                for (std::uint64_t p = l.first(*j); p < l.first(*j + 1); ++p) consumed[p]++;
            }
        });
    }
    for (auto& th : threads) th.join();
    for (std::uint64_t p = 0; p < kN; ++p) REQUIRE(consumed[p] == 1);
    CHECK(l.counts().consumed == kN);
}

TEST_CASE("attach refuses another data set or settings") {
    TempLedger t(info(5, 2));
    LedgerInfo same = info(5, 2);
    Ledger a = Ledger::attach(t.name, &same);
    CHECK(a.total() == 10);
    CHECK(a.plan() == t.l.plan());
    LedgerInfo other = same;
    other.data_fingerprint = 1;
    CHECK_THROWS_WITH_AS(Ledger::attach(t.name, &other), doctest::Contains("another data set"), Error);
    other = same;
    other.epochs = 3;
    CHECK_THROWS_WITH_AS(Ledger::attach(t.name, &other), doctest::Contains("made for 2 epochs"), Error);
}

TEST_CASE("the done flag is seen through shared memory") {
    TempLedger t(info(1));
    Ledger other = Ledger::attach(t.name);
    CHECK_FALSE(other.done());
    t.l.set_done();
    CHECK(other.done());
}

TEST_CASE("train log lineage: weights that died are not counted, resumes bound earlier steps") {
    fs::path dir = fs::temp_directory_path() / ("hsring-trainlog-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    fs::path f = dir / "train-log.0.txt";
    {
        TrainLog log(f);
        log.resume(1, 0);
        std::vector<std::uint64_t> a{0, 1}, b{2, 3}, c{4};
        log.trained(1, 1, a);
        log.trained(1, 2, b);
        log.checkpoint(1, 1);
        log.trained(1, 3, c);  // incarnation 1 dies after step 3: steps 2 and 3 are lost
        log.sync();
    }
    {
        std::ofstream torn(f, std::ios::app);
        torn << "T 1 3 ";  // a torn line from the dying writer
    }
    {
        TrainLog log(f);
        log.resume(2, 1);
        std::vector<std::uint64_t> b{2, 3, 4, 5};
        log.trained(2, 2, b);
        log.checkpoint(2, 2);
    }
    LedgerInfo li = info(3, 2);
    LineageReport r = verify_lineage(f, 2, li);
    CHECK(r.incarnations == 2);
    CHECK(r.surviving == 6);
    CHECK(r.ok());
    REQUIRE(r.epochs.size() == 2);
    CHECK(r.epochs[0].exactly_once == 3);
    CHECK(r.epochs[1].exactly_once == 3);
    // Against an earlier final checkpoint (step 1), positions 2..5 are missing.
    r = verify_lineage(f, 1, li);
    CHECK_FALSE(r.ok());
    CHECK(r.epochs[0].missing == 1);
    CHECK(r.epochs[1].missing == 3);
    // A doubled sample is reported.
    {
        TrainLog log(f);
        std::vector<std::uint64_t> again{0};
        log.trained(2, 2, again);
        log.sync();
    }
    r = verify_lineage(f, 2, li);
    CHECK(r.epochs[0].more_than_once == 1);
    CHECK_FALSE(r.ok());
    fs::remove_all(dir);
}

TEST_CASE("train log lineage: a rejected sample counts once, apart from the trained ones") {
    fs::path dir = fs::temp_directory_path() / ("hsring-trainlog-x-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    fs::path f = dir / "train-log.0.txt";
    {
        TrainLog log(f);
        log.resume(1, 0);
        std::vector<std::uint64_t> a{0, 2}, x{1};
        log.trained(1, 1, a);
        log.rejected(1, 1, x);
        log.checkpoint(1, 1);
    }
    LineageReport r = verify_lineage(f, 1, info(3));
    CHECK(r.ok());
    CHECK(r.epochs[0].exactly_once == 2);
    CHECK(r.epochs[0].rejected == 1);
    CHECK(r.rejected() == 1);
    const auto records = surviving_records(f, 0, 1);
    REQUIRE(records.size() == 3);
    CHECK(std::count_if(records.begin(), records.end(), [](const Ledger::Trained& t) { return t.rejected; }) == 1);
    // Rejected and trained both: more than once.
    {
        TrainLog log(f);
        std::vector<std::uint64_t> again{1};
        log.trained(1, 1, again);
        log.sync();
    }
    r = verify_lineage(f, 1, info(3));
    CHECK(r.epochs[0].more_than_once == 1);
    fs::remove_all(dir);
}

// --- a process killed between a word's CAS and its bookkeeping (issue 12, finding 9) --------

namespace {

// Runs `body` in a child process that dies (_exit) the moment the ledger passes `point`.
void in_child_killed_at(const char* point, const std::function<void()>& body) {
    static std::string g_point;
    g_point = point;
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        set_ledger_test_hook([](const char* p) {
            if (g_point == p) ::_exit(0);
        });
        body();
        ::_exit(1);  // the point was never reached
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
}

} // namespace

TEST_CASE("a drafter killed between a plan slot's consume and its samples': recover re-issues the slot whole") {
    TempLedger t(info(4), 4);
    Ledger& l = t.l;
    REQUIRE(l.take_slot(7, kAll) == 0u);
    in_child_killed_at("consume.cas", [&] { Ledger::attach(t.name).consume_slot(0, 7, 0, 1); });
    CHECK(l.slot_view(0).state == EntryState::Consumed);
    CHECK(l.state(0) == EntryState::InSlot);  // its samples did not follow
    // The drafter's next incarnation resumes from no checkpoint: the slot and all its samples go back.
    const auto rec = l.recover(0, 0);
    CHECK(rec.repended == 4);
    CHECK(l.counts().pending == 4);
    REQUIRE(l.take_slot(8, kAll) == 0u);
    CHECK(l.consume_slot(0, 8, 0, 1));
    CHECK(l.counts().consumed == 4);
}

TEST_CASE("a plan slot re-pended by a process killed before it lowered the mark is taken again") {
    TempLedger t(info(3));
    Ledger& l = t.l;
    for (std::uint64_t j = 0; j < 3; ++j) REQUIRE(l.take_slot(5 + j, kAll) == j);
    in_child_killed_at("repend.cas", [&] { Ledger::attach(t.name).repend_ticket(5); });
    CHECK(l.counts().pending == 1);  // the mark still says "none below"
    // A target's idle path sweeps for it (at most once a second), so it is produced again.
    std::optional<std::uint64_t> got;
    for (int i = 0; i < 40 && !got; ++i) {
        got = l.take_slot(9, kAll);
        if (!got) std::this_thread::sleep_for(100ms);
    }
    CHECK(got == 0u);
    // The supervisor's repair (no worker attached) lowers the mark at once.
    in_child_killed_at("repend.cas", [&] { Ledger::attach(t.name).repend_ticket(9); });
    l.repair();
    CHECK(l.take_slot(10, kAll) == 0u);
}

TEST_CASE("a ledger of another run is refused; a new one is built complete before it has its name") {
    const std::string name = "hsring-test-ledger-tag-" + std::to_string(::getpid());
    const RunTag mine = RunTag::of("/tmp/run-a", 0x11, 0xabc, 0, 1);
    // Plan slots [0,2) [2,4): slot 0 in the checkpoint (one sample rejected), slot 1 not.
    std::vector<Ledger::Trained> durable{{0, 0, 3}, {1, 0, 3, true}};
    const auto plan = plan_of(4, 2);
    {
        Ledger l = Ledger::create(name, info(4), plan, mine, durable);
        CHECK(l.state(0) == EntryState::Durable);
        CHECK(l.state(1) == EntryState::Rejected);
        CHECK(l.state(2) == EntryState::Pending);
        CHECK(l.view(0).step == 3);
        CHECK(l.slot_view(0).state == EntryState::Durable);
        CHECK(l.slot_view(1).state == EntryState::Pending);
    }
    CHECK_NOTHROW(Ledger::attach(name, nullptr, &mine));
    const RunTag other = RunTag::of("/tmp/run-b", 0x11, 0xabc, 0, 1);
    CHECK_THROWS_WITH_AS(Ledger::attach(name, nullptr, &other),
                         doctest::Contains("belongs to another run: run dir /tmp/run-a (this run: /tmp/run-b)"), Error);
    Ledger::remove(name);
    // A train record beyond the data set: refused, and no ledger by that name appears.
    auto beyond = durable;
    beyond.push_back({99, 0, 1});
    CHECK_THROWS_WITH_AS(Ledger::create(name, info(4), plan, mine, beyond), doctest::Contains("another data set"), Error);
    CHECK_FALSE(Ledger::exists(name));
    // Records that cover a plan slot in part were written with another plan.
    std::vector<Ledger::Trained> part{{2, 0, 1}};
    CHECK_THROWS_WITH_AS(Ledger::create(name, info(4), plan, mine, part), doctest::Contains("another packing plan"), Error);
    CHECK_FALSE(Ledger::exists(name));
}
