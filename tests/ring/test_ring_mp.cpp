// The ring across real processes: stress, random SIGKILLs, and a kill at every transition point.
// Workers are tests/ring/ring_worker.cpp; each logs intents (I), commits (C) and deliveries (D).
// The invariant checked everywhere: every committed slot is delivered; nothing is delivered that
// was not written; a slot is delivered twice only if a reader died holding it (and the second
// delivery says so); every checksum holds; every process exits (no waiter stuck).
#include "hsring/ring.hpp"
#include "ring_test_util.hpp"

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using namespace hsring;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

using Uid = std::tuple<unsigned, unsigned, long>;  // writer, incarnation, n

struct Proc {
    pid_t pid = 0;
    std::string role;
    unsigned id = 0, inc = 0;
};

class Cluster {
public:
    explicit Cluster(RingGeometry g) : name_(test::unique_ring_name("mp")), ring_(Ring::create({name_, g, HugePages::Off, true})) {
        dir_ = fs::temp_directory_path() / name_;
        fs::create_directories(dir_);
        log_ = (dir_ / "events.log").string();
        const char* w = std::getenv("HSRING_RING_WORKER");
        REQUIRE_MESSAGE(w, "HSRING_RING_WORKER is set by meson test");
        worker_ = w;
    }
    ~Cluster() {
        for (auto& p : procs_) if (p.pid > 0) { ::kill(p.pid, SIGKILL); ::waitpid(p.pid, nullptr, 0); }
        Ring::remove(name_);
        fs::remove_all(dir_);
    }

    Ring& ring() { return ring_; }

    Proc& spawn(const std::string& role, unsigned id, unsigned inc, long count = 0, std::size_t bytes = 0,
                const std::string& crash_at = "") {
        pid_t pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            if (!crash_at.empty()) ::setenv("HSRING_TEST_CRASH_AT", crash_at.c_str(), 1);
            else ::unsetenv("HSRING_TEST_CRASH_AT");
            std::string ids = std::to_string(id), incs = std::to_string(inc), cs = std::to_string(count),
                        bs = std::to_string(bytes);
            ::execl(worker_.c_str(), "hsring-ring-testworker", role.c_str(), name_.c_str(), log_.c_str(), ids.c_str(),
                    incs.c_str(), cs.c_str(), bs.c_str(), static_cast<char*>(nullptr));
            ::_exit(127);
        }
        procs_.push_back({pid, role, id, inc});
        return procs_.back();
    }

    // Waits for a process; returns its wait status. Fails the test after `limit`.
    int wait(Proc& p, std::chrono::milliseconds limit = 30s) {
        auto end = std::chrono::steady_clock::now() + limit;
        int status = 0;
        while (true) {
            pid_t r = ::waitpid(p.pid, &status, WNOHANG);
            if (r == p.pid) break;
            if (std::chrono::steady_clock::now() > end) {
                FAIL_CHECK("process " << p.role << p.id << " stuck (pid " << p.pid << ")");
                ::kill(p.pid, SIGKILL);
                ::waitpid(p.pid, &status, 0);
                break;
            }
            std::this_thread::sleep_for(5ms);
        }
        p.pid = 0;
        return status;
    }

    void kill(Proc& p) {
        ::kill(p.pid, SIGKILL);
        wait(p);
    }

    std::vector<Proc>& procs() { return procs_; }

    // Stops writers, lets readers drain, waits for everybody, reclaims the dead.
    void finish() {
        ring_.set_stopping(true);
        for (auto& p : procs_) if (p.pid > 0) {
            int st = wait(p, 60s);
            CHECK_MESSAGE((WIFEXITED(st) && WEXITSTATUS(st) == 0), p.role << p.id << " exited with status " << st);
        }
        ring_.reclaim_dead();
    }

    struct Events {
        std::set<Uid> intents, commits;
        std::map<Uid, int> deliveries;
        int redelivered_lines = 0;
        int bad_checksums = 0;
    };
    Events events() const {
        Events e;
        std::ifstream in(log_);
        std::string line;
        while (std::getline(in, line)) {
            std::istringstream ls(line);
            char kind;
            unsigned w, inc;
            long n;
            ls >> kind >> w >> inc >> n;
            if (kind == 'I') e.intents.insert({w, inc, n});
            else if (kind == 'C') e.commits.insert({w, inc, n});
            else if (kind == 'D') {
                unsigned deliveries;
                int ok;
                ls >> deliveries >> ok;
                e.deliveries[{w, inc, n}]++;
                if (deliveries > 1) e.redelivered_lines++;
                if (!ok) e.bad_checksums++;
            }
        }
        return e;
    }

private:
    std::string name_;
    Ring ring_;
    fs::path dir_;
    std::string log_;
    std::string worker_;
    std::vector<Proc> procs_;
};

// The invariants above; `reader_deaths` bounds the duplicate deliveries.
void check_exactly_once(const Cluster::Events& e, int reader_deaths) {
    CHECK(e.bad_checksums == 0);
    int missing = 0, phantom = 0, extra = 0;
    for (const Uid& c : e.commits) missing += e.deliveries.count(c) ? 0 : 1;
    for (const auto& [u, k] : e.deliveries) {
        phantom += e.intents.count(u) ? 0 : 1;
        extra += k - 1;
    }
    CHECK(missing == 0);
    CHECK(phantom == 0);
    CHECK(extra <= reader_deaths);
    CHECK(e.redelivered_lines >= extra);  // every duplicate was flagged as a redelivery
    MESSAGE("commits " << e.commits.size() << ", delivered " << e.deliveries.size() << ", duplicates " << extra
                       << " (reader deaths " << reader_deaths << ")");
}

} // namespace

TEST_CASE("stress: 4 writers x 2 readers move 100k slots, each delivered exactly once") {
    Cluster c(test::small_geometry(8));
    for (unsigned w = 0; w < 4; ++w) c.spawn("writer", w, 0, 25000, 2048);
    for (unsigned r = 0; r < 2; ++r) c.spawn("reader", r, 0);
    for (auto& p : c.procs()) if (p.role == "writer") {
        int st = c.wait(p, 120s);
        CHECK(WIFEXITED(st));
    }
    c.finish();
    auto e = c.events();
    CHECK(e.commits.size() == 100000);
    CHECK(e.deliveries.size() == 100000);
    check_exactly_once(e, 0);
    CHECK(c.ring().occupancy().free == 8);
    CHECK(c.ring().counters().releases == 100000);
}

TEST_CASE("random SIGKILLs of writers and readers lose nothing and double nothing") {
    Cluster c(test::small_geometry(6));
    constexpr long kForever = 1L << 40;
    unsigned next_inc = 1;
    for (unsigned w = 0; w < 3; ++w) c.spawn("writer", w, next_inc++, kForever, 1024);
    for (unsigned r = 0; r < 2; ++r) c.spawn("reader", r, next_inc++);
    std::mt19937 rng(12345);
    int reader_deaths = 0, writer_deaths = 0;
    for (int k = 0; k < 40; ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 60));
        std::vector<std::size_t> alive;
        for (std::size_t i = 0; i < c.procs().size(); ++i)
            if (c.procs()[i].pid > 0) alive.push_back(i);
        const std::size_t v = alive[rng() % alive.size()];
        const std::string role = c.procs()[v].role;
        const unsigned id = c.procs()[v].id;
        c.kill(c.procs()[v]);
        (role == "reader" ? reader_deaths : writer_deaths)++;
        // Half the time the supervisor's part (reclaim) is done here; otherwise the survivors'
        // timed-out waits must find the dead owner themselves.
        if (rng() % 2) c.ring().reclaim_dead();
        if (role == "writer") c.spawn("writer", id, next_inc++, kForever, 1024);
        else c.spawn("reader", id, next_inc++);
    }
    c.finish();
    auto e = c.events();
    CHECK(writer_deaths > 5);
    CHECK(reader_deaths > 5);
    CHECK(e.commits.size() > 100);
    check_exactly_once(e, reader_deaths);
    Occupancy o = c.ring().occupancy();
    CHECK(o.free == 6);  // nothing left WRITING, READY or READING
}

TEST_CASE("a SIGKILL at each transition point is undone by reclaim") {
    struct Case { const char* role; const char* point; };
    for (Case k : {Case{"writer", "claim"}, Case{"writer", "commit.before"}, Case{"writer", "commit.after"},
                   Case{"writer", "abort.before"}, Case{"reader", "acquire"}, Case{"reader", "release.before"},
                   Case{"reader", "release.after"}}) {
        CAPTURE(k.point);
        Cluster c(test::small_geometry(3));
        const bool writer = std::string(k.role) == "writer";
        const std::string crash = std::string(k.point) + ":5";
        // The victim dies at its 5th pass through the point; a healthy partner keeps going. For
        // "abort.before" the writer aborts every 2nd slot it claims, so it passes that point.
        const bool aborts = std::string(k.point) == "abort.before";
        if (aborts) ::setenv("HSRING_TEST_ABORT_EVERY", "2", 1);
        c.spawn("writer", 0, 1, 200, 512, writer ? crash : "");
        ::unsetenv("HSRING_TEST_ABORT_EVERY");
        c.spawn("reader", 0, 2, 0, 0, writer ? "" : crash);
        int st = c.wait(c.procs()[writer ? 0 : 1], 30s);
        const bool died = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
        CHECK(died);
        // The parent reclaims here, but the healthy partner's timed-out wait may have done it
        // first: count what was reclaimed by anybody.
        c.ring().reclaim_dead();
        RingCounters rc = c.ring().counters();
        const std::string pt = k.point;
        CHECK(rc.reclaimed_writing == (pt == "claim" || pt == "commit.before" || pt == "abort.before" ? 1u : 0u));
        if (aborts) CHECK(rc.aborts == 4u);  // the 5th abort died before its CAS
        CHECK(rc.reclaimed_reading == (pt == "acquire" || pt == "release.before" ? 1u : 0u));
        // A replacement finishes the work.
        if (writer) c.spawn("writer", 1, 3, 200, 512);
        else c.spawn("reader", 1, 3);
        if (writer) c.wait(c.procs().back(), 30s);
        else c.wait(c.procs()[0], 30s);
        c.finish();
        auto e = c.events();
        check_exactly_once(e, writer ? 0 : 1);
        if (std::string(k.point) == "release.before") CHECK(e.redelivered_lines == 1);
        if (std::string(k.point) == "commit.before") CHECK(e.intents.size() == e.commits.size() + 1);
        CHECK(c.ring().occupancy().free == 3);
    }
}
