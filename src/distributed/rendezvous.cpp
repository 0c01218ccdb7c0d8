// The rendezvous of the drafter gang (see rendezvous.hpp).
#include "distributed/rendezvous.hpp"

#include "distributed/error_text.hpp"
#include "hsring/error.hpp"
#include "hsring/log.hpp"
#include "hsring/run_identity.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

namespace hsring::distributed {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string key(std::int64_t round, const std::string& k) { return fmt::format("hsring/r{}/{}", round, k); }

std::vector<std::uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<std::uint8_t>& b) { return {b.begin(), b.end()}; }

milliseconds left(Clock::time_point deadline) {
    return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

std::string host_name() {
    char h[256] = {};
    ::gethostname(h, sizeof h - 1);
    return h;
}

double seconds(milliseconds t) { return static_cast<double>(t.count()) / 1000.0; }

// Rank 0 refuses the round: the message goes into the store, and rank 0 waits (a little) until
// every rank that joined has read it before it exits and takes the store with it.
[[noreturn]] void refuse(c10d::Store& store, std::int64_t round, std::uint32_t joined, const std::string& msg) {
    store.set(key(round, "error"), bytes(msg));
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < until) {
        if (store.add(key(round, "error_seen"), 0) >= static_cast<std::int64_t>(joined)) break;
        std::this_thread::sleep_for(milliseconds(50));
    }
    fail("{}", msg);
}

} // namespace

void Rendezvous::mark_formed() { store->set(key(round, "formed"), bytes("1")); }

Rendezvous rendezvous(const RendezvousOptions& o) {
    const GangPlace& p = o.place;
    const Clock::time_point deadline = Clock::now() + o.timeout;
    const std::string where = fmt::format("{}:{}", o.master_addr, o.master_port);
    Rendezvous r;

    // Connect (rank 0 serves). A store whose server died under us is dropped and connected again.
    for (;;) {
        c10d::TCPStoreOptions so;
        so.port = o.master_port;
        so.isServer = p.is_master();
        so.waitWorkers = false;
        so.numWorkers = std::nullopt;
        so.timeout = left(deadline);
        try {
            r.store = c10::make_intrusive<c10d::TCPStore>(o.master_addr, so);
        } catch (const std::exception& e) {
            if (p.is_master())
                fail("drafter rank 0 cannot serve the rendezvous on port {} ([distributed] master_port): {}. Is "
                     "another run using that port? Pick another master_port (the same on every machine)",
                     o.master_port, error_text(e));
            fail("cannot reach the master {} within {:g} s ([distributed] timeout_s): is `hsring run` running on "
                 "machine 0 (node rank 0), and are [distributed] master_addr and master_port (or MASTER_ADDR, "
                 "MASTER_PORT) the same on every machine? ({})", where, seconds(o.timeout), error_text(e));
        }
        if (p.is_master()) {
            r.round = r.store->add("hsring/round", 1);
            break;
        }
        try {
            r.store->setTimeout(left(deadline));
            bool joined = false;
            while (!joined) {
                r.round = std::stoll(text(r.store->get("hsring/round")));
                // A formed or failed round belongs to a gang that is gone: wait for the next one.
                if (!r.store->check({key(r.round, "formed")}) && !r.store->check({key(r.round, "error")})) {
                    joined = true;
                    break;
                }
                if (Clock::now() > deadline)
                    fail("the master {} did not start a new rendezvous within {:g} s ([distributed] timeout_s): its "
                         "drafter rank 0 is still in an earlier gang", where, seconds(o.timeout));
                std::this_thread::sleep_for(milliseconds(200));
            }
            break;
        } catch (const Error&) {
            throw;
        } catch (const std::exception& e) {
            // The server went away (an old rank 0 that was still exiting): connect again.
            if (Clock::now() > deadline)
                fail("lost the master {} during the rendezvous and it did not come back within {:g} s: {}", where,
                     seconds(o.timeout), error_text(e));
            log::info("the rendezvous store at {} went away ({}); connecting again", where, error_text(e));
            std::this_thread::sleep_for(milliseconds(500));
        }
    }

    // Claim our global rank in this round, then publish who we are.
    const std::uint32_t rank = p.global_rank(), world = p.world();
    if (r.store->add(key(r.round, fmt::format("claim/{}", rank)), 1) > 1)
        fail("drafter rank {} (machine {}, local rank {}) joined the rendezvous twice: two machines have the same "
             "node rank {} ([distributed] node_rank, NODE_RANK or --node-rank must differ per machine)", rank,
             p.node_rank, p.local_rank, p.node_rank);
    const nlohmann::json me = {{"identity", o.identity}, {"node_rank", p.node_rank}, {"local_rank", p.local_rank},
                               {"host", host_name()}, {"pid", ::getpid()}};
    r.store->set(key(r.round, fmt::format("id/{}", rank)), bytes(me.dump()));

    if (p.is_master()) {
        std::vector<std::string> ids;
        for (std::uint32_t k = 1; k < world; ++k) ids.push_back(key(r.round, fmt::format("id/{}", k)));
        while (!ids.empty() && !r.store->check(ids)) {
            if (Clock::now() > deadline) {
                std::string missing;
                for (std::uint32_t k = 1; k < world; ++k) {
                    if (r.store->check({key(r.round, fmt::format("id/{}", k))})) continue;
                    const GangPlace q = GangPlace::of(k, p.nnodes, p.local_world);
                    missing += fmt::format("{}rank {} (machine {}, drafter.{})", missing.empty() ? "" : ", ", k,
                                           q.node_rank, q.local_rank);
                }
                std::uint32_t joined = 0;
                for (std::uint32_t k = 1; k < world; ++k) joined += r.store->check({key(r.round, fmt::format("id/{}", k))});
                refuse(*r.store, r.round, joined,
                       fmt::format("drafter ranks did not join within {:g} s ([distributed] timeout_s): {}. Is `hsring "
                                   "run` running on those machines with the same config and master {}?",
                                   seconds(o.timeout), missing, where));
            }
            std::this_thread::sleep_for(milliseconds(50));
        }
        std::string diffs;
        for (std::uint32_t k = 1; k < world; ++k) {
            const auto other = nlohmann::json::parse(text(r.store->get(key(r.round, fmt::format("id/{}", k)))));
            const std::uint32_t node = other.value("node_rank", 0u);
            const std::string d = identity_differences(other["identity"], o.identity, node);
            if (!d.empty() && diffs.find(fmt::format("on machine {},", node)) == std::string::npos)
                diffs += (diffs.empty() ? "" : "; ") + d;
        }
        if (!diffs.empty())
            refuse(*r.store, r.round, world - 1,
                   fmt::format("the machines of this run do not agree: {}. Use the same config and data on every "
                               "machine", diffs));
        r.store->set(key(r.round, "ok"), bytes("1"));
    } else {
        try {
            for (;;) {
                if (r.store->check({key(r.round, "error")})) {
                    const std::string msg = text(r.store->get(key(r.round, "error")));
                    r.store->add(key(r.round, "error_seen"), 1);
                    fail("the master refused the rendezvous: {}", msg);
                }
                if (r.store->check({key(r.round, "ok")})) break;
                if (Clock::now() > deadline)
                    fail("the master {} did not complete the rendezvous within {:g} s ([distributed] timeout_s): are "
                         "all {} machines running `hsring run`?", where, seconds(o.timeout), p.nnodes);
                std::this_thread::sleep_for(milliseconds(50));
            }
        } catch (const Error&) {
            throw;
        } catch (const std::exception& e) {
            fail("lost the master {} during the rendezvous (its drafter rank 0 stopped): {}", where, error_text(e));
        }
    }
    r.store->setTimeout(o.timeout);
    r.group_store = c10::make_intrusive<c10d::PrefixStore>(key(r.round, "pg"), r.store);
    return r;
}

} // namespace hsring::distributed
