// The sample ledger and the train log: state machine, re-issue, tickets that protect against
// double training, recovery after a drafter death, concurrent takers, and lineage verification.
#include "hsring/error.hpp"
#include "hsring/ledger.hpp"
#include "hsring/train_log.hpp"

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

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

struct TempLedger {
    std::string name;
    Ledger l;
    explicit TempLedger(LedgerInfo info)
        : name("hsring-test-ledger-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++)),
          l(Ledger::create(name, info)) {}
    ~TempLedger() { Ledger::remove(name); }
    static std::atomic<int>& counter() {
        static std::atomic<int> c{0};
        return c;
    }
};

LedgerInfo info(std::uint64_t n, std::uint32_t epochs = 1) { return LedgerInfo{0xabc, n, epochs, 7, true}; }

} // namespace

TEST_CASE("targets take positions in order until the data is exhausted") {
    TempLedger t(info(5, 2));
    Ledger& l = t.l;
    CHECK(l.total() == 10);
    for (std::uint64_t p = 0; p < 10; ++p) CHECK(l.take(1) == p);
    CHECK_FALSE(l.take(1));
    CHECK(l.counts().in_slot == 10);
    CHECK(l.epoch_of(7) == 1);
}

TEST_CASE("an untaken or re-issued position is handed out again before new ones") {
    TempLedger t(info(10));
    Ledger& l = t.l;
    for (int i = 0; i < 6; ++i) l.take(i < 3 ? 1 : 2);
    CHECK(l.untake(4, 2));
    CHECK_FALSE(l.untake(4, 2));  // already PENDING
    CHECK(l.take(3) == 4);
    // A reclaimed slot's ticket sends exactly its positions back.
    CHECK(l.repend_ticket(1) == 3);
    CHECK(l.state(0) == EntryState::Pending);
    CHECK(l.state(3) == EntryState::InSlot);
    CHECK(l.take(4) == 0);
    CHECK(l.take(4) == 1);
    CHECK(l.take(4) == 2);
    CHECK(l.take(4) == 6);
}

TEST_CASE("consume needs the ticket of the slot the sample came in") {
    TempLedger t(info(4));
    Ledger& l = t.l;
    REQUIRE(l.take(10) == 0u);
    REQUIRE(l.take(10) == 1u);
    CHECK(l.consume(0, 10, 0, 1));
    CHECK_FALSE(l.consume(0, 10, 0, 1));  // no double consumption
    // Slot 10's writer died: its unconsumed sample is re-issued and taken by slot 11...
    CHECK(l.repend_ticket(10) == 1);
    REQUIRE(l.take(11) == 1u);
    // ...so a late redelivery of slot 10 cannot train it again.
    CHECK_FALSE(l.consume(1, 10, 0, 1));
    CHECK(l.consume(1, 11, 0, 2));
    CHECK(l.consumed_or_durable() == 2);
}

TEST_CASE("a checkpoint makes consumed samples durable; a drafter death re-issues the rest") {
    TempLedger t(info(6));
    Ledger& l = t.l;
    for (std::uint64_t p = 0; p < 6; ++p) {
        REQUIRE(l.take(p + 1) == p);
        REQUIRE(l.consume(p, p + 1, 0, p / 2 + 1));  // steps 1,1,2,2,3,3
    }
    CHECK(l.make_durable(0, 1) == 2);
    // The drafter dies; its checkpoint was step 2: step 3's samples are trained again.
    auto r = l.recover(0, 2);
    CHECK(r.durable == 2);
    CHECK(r.repended == 2);
    LedgerCounts c = l.counts();
    CHECK(c.durable == 4);
    CHECK(c.pending == 2);
    CHECK(l.consumed_or_durable() == 4);
    CHECK(l.take(9) == 4u);
    CHECK(l.take(9) == 5u);
    CHECK_FALSE(l.take(9));
}

TEST_CASE("concurrent takers, re-issues and consumers account for every position exactly once") {
    constexpr std::uint64_t kN = 20000;
    TempLedger t(info(kN));
    Ledger& l = t.l;
    std::atomic<std::uint64_t> next_ticket{1};
    std::mutex m;
    std::vector<int> consumed(kN, 0);
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k) {
        threads.emplace_back([&, k] {
            std::mt19937 rng(static_cast<unsigned>(k));
            for (;;) {
                const std::uint64_t ticket = next_ticket++;
                std::vector<std::uint64_t> got;
                for (int i = 0; i < 8; ++i)
                    if (auto p = l.take(ticket)) got.push_back(*p);
                if (got.empty()) {
                    if (l.consumed_or_durable() == kN) return;
                    std::this_thread::yield();
                    continue;
                }
                if (rng() % 5 == 0) {  // this "writer died": its slot is reclaimed
                    CHECK(l.repend_ticket(ticket) == got.size());
                    continue;
                }
                for (auto p : got) {
                    REQUIRE(l.consume(p, ticket, 0, 1));
                    std::lock_guard g(m);
                    consumed[p]++;
                }
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

// --- a process killed between an entry's CAS and its bookkeeping (issue 12, finding 9) -------

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

std::uint64_t trained_entries(const Ledger& l) {
    const LedgerCounts c = l.counts();
    return c.consumed + c.durable;
}

} // namespace

TEST_CASE("a drafter killed between a consume's CAS and its count: recover recounts, nothing ends early or late") {
    TempLedger t(info(4));
    Ledger& l = t.l;
    for (int i = 0; i < 4; ++i) REQUIRE(l.take(7));
    in_child_killed_at("consume.cas", [&] {
        Ledger mine = Ledger::attach(t.name);
        mine.consume(0, 7, 0, 1);
    });
    CHECK(l.state(0) == EntryState::Consumed);
    // The drafter's next incarnation resumes from no checkpoint: position 0 goes back to PENDING.
    const auto rec = l.recover(0, 0);
    CHECK(rec.repended == 1);
    CHECK(l.consumed_or_durable() == trained_entries(l));  // was 2^64 - 1: "everything consumed"
    // Everything trained once: the count reaches the total exactly then.
    REQUIRE(l.take(8) == 0u);
    for (std::uint64_t p = 0; p < 4; ++p) REQUIRE(l.consume(p, p == 0 ? 8 : 7, 0, 1));
    CHECK(l.consumed_or_durable() == 4);
}

TEST_CASE("the supervisor's repair recounts what a killed drafter left uncounted") {
    TempLedger t(info(3));
    Ledger& l = t.l;
    for (int i = 0; i < 3; ++i) REQUIRE(l.take(1));
    in_child_killed_at("consume.cas", [&] { Ledger::attach(t.name).consume(2, 1, 0, 4); });
    CHECK(l.consumed_or_durable() == 0);  // the CAS happened, its count did not
    l.repair();
    CHECK(l.consumed_or_durable() == 1);
}

TEST_CASE("a position re-pended by a process killed before it lowered the mark is taken again") {
    TempLedger t(info(3));
    Ledger& l = t.l;
    for (int i = 0; i < 3; ++i) REQUIRE(l.take(5));
    in_child_killed_at("repend.cas", [&] { Ledger::attach(t.name).repend_ticket(5); });
    CHECK(l.counts().pending == 1);  // the first re-pended position; the mark still says "none below"
    // A target's idle path sweeps for it (at most once a second), so it is produced again.
    std::optional<std::uint64_t> got;
    for (int i = 0; i < 40 && !got; ++i) {
        got = l.take(6);
        if (!got) std::this_thread::sleep_for(100ms);
    }
    CHECK(got == 0u);
}

TEST_CASE("a ledger of another run is refused; a new one is built complete before it has its name") {
    const std::string name = "hsring-test-ledger-tag-" + std::to_string(::getpid());
    const RunTag mine = RunTag::of("/tmp/run-a", 0x11, 0xabc, 0, 1);
    std::vector<Ledger::Trained> durable{{0, 0, 3}, {2, 1, 4}};
    {
        Ledger l = Ledger::create(name, info(4), mine, durable);
        CHECK(l.state(0) == EntryState::Durable);
        CHECK(l.state(1) == EntryState::Pending);
        CHECK(l.view(2).rank == 1);
        CHECK(l.view(2).step == 4);
        CHECK(l.consumed_or_durable() == 2);
    }
    CHECK_NOTHROW(Ledger::attach(name, nullptr, &mine));
    const RunTag other = RunTag::of("/tmp/run-b", 0x11, 0xabc, 0, 1);
    CHECK_THROWS_WITH_AS(Ledger::attach(name, nullptr, &other),
                         doctest::Contains("belongs to another run: run dir /tmp/run-a (this run: /tmp/run-b)"), Error);
    Ledger::remove(name);
    // A train record beyond the data set: refused, and no ledger by that name appears.
    durable.push_back({99, 0, 1});
    CHECK_THROWS_WITH_AS(Ledger::create(name, info(4), mine, durable), doctest::Contains("another data set"), Error);
    CHECK_FALSE(Ledger::exists(name));
}
