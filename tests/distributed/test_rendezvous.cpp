// The drafter gang's rendezvous with real processes on loopback (Gloo on the CPU): each rank is
// a fresh process (this binary, re-executed) that joins the gang and runs its first collective.
// - A rank SIGKILLed right after it claimed its place leaves a claim behind; its restart takes
//   the place over (the claimant gave no sign of life) and the gang forms.
// - A second live process with the same rank (two machines with one node rank) is refused with
//   the node-rank message; the first one stays and the gang forms with it.
// - Machines that disagree on the number of drafters per machine (and so on every global rank)
//   stop with one message naming [topology] drafters and both values, whichever has more.
#include "distributed/c10d_gang.hpp"
#include "distributed/rendezvous.hpp"
#include "hsring/error.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

using namespace hsring;

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kKeepAlive = std::chrono::milliseconds(1000);

struct RankSpec {
    std::uint32_t node = 0, nnodes = 1, local = 0, local_world = 1;
    int drafters_in_identity = 1;  // what this machine's config says: [topology] drafters (count)
};

// A rank, in the child: joins, one more all-reduce, writes "ok <world>" or the error to `out`.
int rank_main(const RankSpec& s, std::uint16_t port, const std::filesystem::path& out) {
    try {
        distributed::GangOptions o;
        o.rendezvous.place = GangPlace{s.node, s.nnodes, s.local, s.local_world};
        o.rendezvous.master_addr = "127.0.0.1";
        o.rendezvous.master_port = port;
        o.rendezvous.timeout = std::chrono::seconds(30);
        o.rendezvous.keep_alive_timeout = kKeepAlive;
        o.rendezvous.identity = {{"[topology] drafters (count)", s.drafters_in_identity}, {"[run] seed", 5}};
        auto gang = distributed::C10dGang::join(o);
        double one = 1;
        gang->allreduce_sum({&one, 1});
        std::ofstream(out) << "ok " << one << "\n";
        // Rank 0 serves the store: stay a moment so that nobody loses it mid-collective.
        if (o.rendezvous.place.is_master()) std::this_thread::sleep_for(std::chrono::milliseconds(500));
        return 0;
    } catch (const Error& e) {
        std::ofstream(out) << "error " << e.what() << "\n";
        return 3;
    } catch (const std::exception& e) {
        std::ofstream(out) << "failed " << e.what() << "\n";
        return 1;
    }
}

const int kRankChild = [] {
    const char* spec = std::getenv("HSRING_RZ_SPEC");
    if (!spec) return 0;
    ::signal(SIGPIPE, SIG_IGN);  // as a worker the supervisor spawned: a dead peer is EPIPE, not a signal
    RankSpec s;
    std::istringstream in(spec);
    in >> s.node >> s.nnodes >> s.local >> s.local_world >> s.drafters_in_identity;
    ::_exit(rank_main(s, static_cast<std::uint16_t>(std::atoi(std::getenv("HSRING_RZ_PORT"))),
                      std::getenv("HSRING_RZ_OUT")));
}();

std::string slurp(const std::filesystem::path& file) {
    std::ifstream in(file);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

struct Rank {
    pid_t pid = 0;
    std::filesystem::path out;
};

class Gang {
public:
    Gang() : port_(distributed::free_loopback_port()) {
        dir_ = std::filesystem::temp_directory_path() / fmt::format("hsring-rz-{}-{}", ::getpid(), port_);
        std::filesystem::create_directories(dir_);
    }
    ~Gang() {
        for (auto& r : ranks_)
            if (r.pid > 0) {
                ::kill(r.pid, SIGKILL);
                ::waitpid(r.pid, nullptr, 0);
            }
        std::filesystem::remove_all(dir_);
    }

    // Starts a rank process; returns its index.
    std::size_t start(const RankSpec& s) {
        Rank r;
        r.out = dir_ / fmt::format("rank-{}.out", ranks_.size());
        r.pid = ::fork();
        REQUIRE(r.pid >= 0);
        if (r.pid == 0) {
            ::setenv("HSRING_RZ_SPEC", fmt::format("{} {} {} {} {}", s.node, s.nnodes, s.local, s.local_world,
                                                   s.drafters_in_identity).c_str(), 1);
            ::setenv("HSRING_RZ_PORT", std::to_string(port_).c_str(), 1);
            ::setenv("HSRING_RZ_OUT", r.out.c_str(), 1);
            ::execl("/proc/self/exe", "test_rendezvous", static_cast<char*>(nullptr));
            ::_exit(127);
        }
        ranks_.push_back(r);
        return ranks_.size() - 1;
    }

    // Its exit code (-signal when killed), waiting at most `limit`.
    int wait(std::size_t i, std::chrono::seconds limit = std::chrono::seconds(40)) {
        const auto until = Clock::now() + limit;
        for (;;) {
            int st = 0;
            const pid_t got = ::waitpid(ranks_[i].pid, &st, WNOHANG);
            if (got == ranks_[i].pid) {
                ranks_[i].pid = 0;
                return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
            }
            if (Clock::now() > until) FAIL("rank process " << i << " did not end within " << limit.count() << " s");
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
    bool running(std::size_t i) { return ranks_[i].pid > 0 && ::waitpid(ranks_[i].pid, nullptr, WNOHANG) == 0; }
    void kill(std::size_t i) {
        ::kill(ranks_[i].pid, SIGKILL);
        REQUIRE(wait(i) == -SIGKILL);
    }
    std::string out(std::size_t i) const { return slurp(ranks_[i].out); }

    // Waits until `key` exists in the rendezvous store (as a client of rank 0's store).
    void wait_for_key(const std::string& key) {
        if (!store_) {
            c10d::TCPStoreOptions so;
            so.port = port_;
            so.isServer = false;
            so.waitWorkers = false;
            so.timeout = std::chrono::seconds(30);
            store_ = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
        }
        const auto until = Clock::now() + std::chrono::seconds(30);
        while (!store_->check({key})) {
            REQUIRE(Clock::now() < until);
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }

private:
    std::uint16_t port_;
    std::filesystem::path dir_;
    std::vector<Rank> ranks_;
    c10::intrusive_ptr<c10d::TCPStore> store_;
};

RankSpec machine(std::uint32_t node, std::uint32_t nnodes) { return {node, nnodes, 0, 1, 1}; }

} // namespace

TEST_CASE("a rank SIGKILLed right after it claimed its place is evicted: its restart joins the gang") {
    Gang g;
    const auto master = g.start(machine(0, 3));
    const auto first = g.start(machine(1, 3));
    // Rank 1 claimed (the gang waits for machine 2): killed there, its claim left behind.
    g.wait_for_key("hsring/r1/claim/1");
    g.kill(first);
    const auto t0 = Clock::now();
    const auto again = g.start(machine(1, 3));
    const auto last = g.start(machine(2, 3));
    for (auto i : {master, again, last}) {
        CAPTURE(i);
        INFO("its output: " << g.out(i));
        CHECK(g.wait(i) == 0);
        CHECK(g.out(i) == "ok 3\n");
    }
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    MESSAGE("the restarted rank 1 was in the gang " << took << " s after its start (keep-alive timeout "
                                                    << kKeepAlive.count() / 1000.0 << " s)");
}

TEST_CASE("a second live process with the same rank is refused: two machines have the same node rank") {
    Gang g;
    const auto master = g.start(machine(0, 3));
    const auto first = g.start(machine(1, 3));
    g.wait_for_key("hsring/r1/id/1");
    const auto twin = g.start(machine(1, 3));
    CHECK(g.wait(twin) == 3);
    INFO(g.out(twin));
    CHECK(g.out(twin).find("two machines have the same node rank 1 ([distributed] node_rank, NODE_RANK or "
                           "--node-rank must differ per machine)") != std::string::npos);
    CHECK(g.running(first));
    const auto last = g.start(machine(2, 3));
    for (auto i : {master, first, last}) {
        CAPTURE(i);
        INFO("its output: " << g.out(i));
        CHECK(g.wait(i) == 0);
        CHECK(g.out(i) == "ok 3\n");
    }
}

TEST_CASE("machines with different drafters per machine: one message naming [topology] drafters and both values") {
    SUBCASE("machine 1 has more") {
        Gang g;
        const auto master = g.start({0, 2, 0, 1, 1});
        const auto a = g.start({1, 2, 0, 2, 2});  // global rank 2 of a world of 4, for it
        const std::string want = "the machines of this run do not agree: [topology] drafters (count) is 2 on machine 1, "
                                 "1 on machine 0 (the master)";
        for (auto i : {master, a}) {
            CAPTURE(i);
            INFO("its output: " << g.out(i));
            CHECK(g.wait(i) == 3);
            CHECK(g.out(i).find(want) != std::string::npos);
        }
    }
    SUBCASE("machine 0 has more") {
        Gang g;
        const auto master = g.start({0, 2, 0, 2, 2});
        const auto local = g.start({0, 2, 1, 2, 2});
        g.wait_for_key("hsring/r1/id/1");  // machine 0's drafter.1 joined (a refused round is closed to later ones)
        const auto other = g.start({1, 2, 0, 1, 1});  // global rank 1, as machine 0's drafter.1
        const std::string want = "[topology] drafters (count) is 1 on machine 1, 2 on machine 0 (the master)";
        for (auto i : {master, local, other}) {
            CAPTURE(i);
            INFO("its output: " << g.out(i));
            CHECK(g.wait(i) == 3);
            CHECK(g.out(i).find(want) != std::string::npos);
            CHECK(g.out(i).find("joined the rendezvous twice") == std::string::npos);
        }
    }
}
