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

constexpr milliseconds kPoll{50};
constexpr const char* kEvicted = "evicted:";

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

// Unique per process start (a pid can be reused), and readable in the duplicate-rank message.
std::string claim_token() {
    return fmt::format("pid {} on {} (at {})", ::getpid(), host_name(), Clock::now().time_since_epoch().count());
}

// A round that is closed (rank 0 wrote "ok"), formed or refused belongs to a gang that is gone
// or complete: a rank arriving now waits for the next round.
bool closed(c10d::Store& s, std::int64_t round) {
    return s.check({key(round, "ok")}) || s.check({key(round, "formed")}) || s.check({key(round, "error")});
}

// Rank 0 refused the round: pass its message on.
void throw_if_refused(c10d::Store& s, std::int64_t round) {
    if (!s.check({key(round, "error")})) return;
    const std::string msg = text(s.get(key(round, "error")));
    s.add(key(round, "error_seen"), 1);
    fail("the master refused the rendezvous: {}", msg);
}

// Rank 0 refuses the round: the message goes into the store, and rank 0 waits (a little) until
// every rank that joined has read it before it exits and takes the store with it.
[[noreturn]] void refuse(c10d::Store& store, std::int64_t round, std::uint32_t joined, const std::string& msg) {
    store.set(key(round, "error"), bytes(msg));
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < until) {
        if (store.add(key(round, "error_seen"), 0) >= static_cast<std::int64_t>(joined)) break;
        std::this_thread::sleep_for(kPoll);
    }
    fail("{}", msg);
}

std::string duplicate(const GangPlace& p, std::uint32_t rank, const std::string& holder) {
    return fmt::format("drafter rank {} (machine {}, local rank {}) joined the rendezvous twice: two machines have the "
                       "same node rank {} ([distributed] node_rank, NODE_RANK or --node-rank must differ per machine); "
                       "the other one is {}", rank, p.node_rank, p.local_rank, p.node_rank, holder);
}

// Makes global rank `rank` of the round ours. A claim whose holder's keep-alive stands still for
// kKeepAliveTimeout is a dead process's (killed after it claimed): it is taken over. A holder
// that keeps beating is alive: a second machine with the same node rank, a user error.
void claim(c10d::Store& s, std::int64_t round, const GangPlace& p, const std::string& token, milliseconds evict_after) {
    const std::uint32_t rank = p.global_rank();
    const std::string ck = key(round, fmt::format("claim/{}", rank)), beat = key(round, fmt::format("beat/{}", rank));
    for (;;) {
        std::string held = text(s.compareSet(ck, std::vector<std::uint8_t>{}, bytes(token)));
        if (held.starts_with(kEvicted)) held = text(s.compareSet(ck, bytes(held), bytes(token)));
        if (held == token) return;
        if (held.starts_with(kEvicted)) continue;  // evicted again meanwhile: try again
        const std::int64_t beat0 = s.add(beat, 0);
        const auto until = Clock::now() + evict_after;
        bool moved = false, changed_hands = false;
        while (!moved && !changed_hands && Clock::now() < until) {
            std::this_thread::sleep_for(kPoll);
            throw_if_refused(s, round);
            moved = s.add(beat, 0) != beat0 || closed(s, round);
            changed_hands = text(s.get(ck)) != held;
        }
        if (changed_hands) continue;
        if (moved) fail("{}", duplicate(p, rank, held));
        log::warn("drafter rank {} of rendezvous round {} was claimed by {}, which gave no sign of life for {:g} s (it "
                  "died after claiming): taking its place", rank, round, held, seconds(evict_after));
        s.compareSet(ck, bytes(held), bytes(kEvicted + held));
    }
}

// A rank arriving while a gang of an earlier round trains: that round's claim of its global rank
// is held by a process that still beats (keep_beating) when a second machine has its node rank;
// a dead holder (a rank that is being restarted) stands still, and the newcomer waits for the next
// round as before.
void refuse_if_taken(c10d::Store& s, std::int64_t round, const GangPlace& p, milliseconds alive_within) {
    const std::uint32_t rank = p.global_rank();
    const std::string ck = key(round, fmt::format("claim/{}", rank)), beat = key(round, fmt::format("beat/{}", rank));
    if (!s.check({key(round, "formed")}) || !s.check({ck})) return;
    const std::string held = text(s.get(ck));
    const std::int64_t beat0 = s.add(beat, 0);
    for (const auto until = Clock::now() + alive_within; Clock::now() < until;) {
        std::this_thread::sleep_for(kPoll);
        if (s.add(beat, 0) != beat0) fail("{}", duplicate(p, rank, held));
    }
}

struct Joined {
    std::string token;  // the claim the rank's identity was published under
    nlohmann::json id;
};

} // namespace

void Rendezvous::mark_formed() { store->set(key(round, "formed"), bytes("1")); }

void Rendezvous::keep_beating(std::uint32_t global_rank) {
    beating = std::make_unique<std::jthread>([s = store, k = key(round, fmt::format("beat/{}", global_rank))](
                                                 std::stop_token stop) {
        while (!stop.stop_requested()) {
            try {
                s->add(k, 1);
            } catch (const std::exception&) {
                return;  // the master is gone: the next collective says so
            }
            for (int i = 0; i < 5 && !stop.stop_requested(); ++i) std::this_thread::sleep_for(kPoll);
        }
    });
}

Rendezvous rendezvous(const RendezvousOptions& o) {
    const GangPlace& p = o.place;
    const Clock::time_point deadline = Clock::now() + o.timeout;
    const std::string where = fmt::format("{}:{}", o.master_addr, o.master_port);
    const std::string token = claim_token();
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
            // First thing in the round: the others compare themselves with it before they claim.
            const nlohmann::json me = {{"identity", o.identity}, {"node_rank", 0}, {"local_rank", 0},
                                       {"host", host_name()}, {"pid", ::getpid()}, {"token", token}};
            r.store->set(key(r.round, "id/0"), bytes(me.dump()));
            break;
        }
        try {
            r.store->setTimeout(left(deadline));
            std::int64_t looked = 0;
            for (;;) {
                r.round = std::stoll(text(r.store->get("hsring/round")));
                if (!closed(*r.store, r.round)) break;
                if (r.round != looked) {
                    looked = r.round;
                    refuse_if_taken(*r.store, r.round, p, o.keep_alive_timeout);
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

    const std::uint32_t rank = p.global_rank(), world = p.world();
    const std::string disagree = key(r.round, "disagree");
    if (p.is_master()) {
        // Wait until every rank joined under a claim it still holds and is alive, or one of them
        // found that its machine disagrees with this one.
        std::vector<Joined> joined(world);
        for (;;) {
            if (r.store->check({disagree})) {
                std::uint32_t n = 0;
                for (std::uint32_t k = 1; k < world; ++k) n += r.store->check({key(r.round, fmt::format("id/{}", k))});
                refuse(*r.store, r.round, n, text(r.store->get(disagree)));
            }
            std::string missing;
            std::uint32_t present = 0;
            for (std::uint32_t k = 1; k < world; ++k) {
                const std::string idk = key(r.round, fmt::format("id/{}", k));
                bool ok = r.store->check({idk});
                if (ok) {
                    joined[k].id = nlohmann::json::parse(text(r.store->get(idk)));
                    joined[k].token = joined[k].id.value("token", "");
                    ok = text(r.store->get(key(r.round, fmt::format("claim/{}", k)))) == joined[k].token;
                }
                present += ok;
                if (ok) continue;
                const GangPlace q = GangPlace::of(k, p.nnodes, p.local_world);
                missing += fmt::format("{}rank {} (machine {}, drafter.{})", missing.empty() ? "" : ", ", k,
                                       q.node_rank, q.local_rank);
            }
            if (missing.empty()) {
                // Alive: each one's keep-alive moves (they beat every kPoll while they wait for
                // "ok"). One that stands still died after it joined: evicted, and waited for again.
                std::vector<std::int64_t> beat0(world);
                for (std::uint32_t k = 1; k < world; ++k) beat0[k] = r.store->add(key(r.round, fmt::format("beat/{}", k)), 0);
                std::vector<bool> alive(world, false);
                const auto until = Clock::now() + o.keep_alive_timeout;
                for (bool all = world == 1; !all && Clock::now() < until;) {
                    std::this_thread::sleep_for(kPoll);
                    all = true;
                    for (std::uint32_t k = 1; k < world; ++k) {
                        if (!alive[k]) alive[k] = r.store->add(key(r.round, fmt::format("beat/{}", k)), 0) != beat0[k];
                        all = all && alive[k];
                    }
                }
                bool evicted = false;
                for (std::uint32_t k = 1; k < world; ++k) {
                    if (alive[k]) continue;
                    log::warn("drafter rank {} ({} pid {}) joined rendezvous round {} but gave no sign of life for {:g} "
                              "s: it died; waiting for it to join again", k, joined[k].id.value("host", "?"),
                              joined[k].id.value("pid", 0), r.round, seconds(o.keep_alive_timeout));
                    r.store->compareSet(key(r.round, fmt::format("claim/{}", k)), bytes(joined[k].token),
                                        bytes(kEvicted + joined[k].token));
                    evicted = true;
                }
                if (!evicted) break;
                continue;
            }
            if (Clock::now() > deadline)
                refuse(*r.store, r.round, present,
                       fmt::format("drafter ranks did not join within {:g} s ([distributed] timeout_s): {}. Is `hsring "
                                   "run` running on those machines with the same config and master {}?",
                                   seconds(o.timeout), missing, where));
            std::this_thread::sleep_for(kPoll);
        }
        // Every joiner compared itself with us already; this catches a joiner of another
        // version that did not.
        std::string diffs;
        for (std::uint32_t k = 1; k < world; ++k) {
            const std::uint32_t node = joined[k].id.value("node_rank", 0u);
            const std::string d = identity_differences(joined[k].id["identity"], o.identity, node);
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
            // Compare with the master before claiming: machines that disagree on the number of
            // machines or of drafters per machine also disagree on what the global ranks are.
            const std::string master_id = key(r.round, "id/0");
            while (!r.store->check({master_id})) {
                throw_if_refused(*r.store, r.round);
                if (Clock::now() > deadline)
                    fail("the master {} did not publish its settings within {:g} s ([distributed] timeout_s)", where,
                         seconds(o.timeout));
                std::this_thread::sleep_for(kPoll);
            }
            const auto master = nlohmann::json::parse(text(r.store->get(master_id)));
            if (const std::string d = identity_differences(o.identity, master["identity"], p.node_rank); !d.empty()) {
                const std::string msg = fmt::format("the machines of this run do not agree: {}. Use the same config and "
                                                    "data on every machine", d);
                r.store->set(disagree, bytes(msg));  // rank 0 refuses the round with it
                fail("{}", msg);
            }
            claim(*r.store, r.round, p, token, o.keep_alive_timeout);
            const nlohmann::json me = {{"identity", o.identity}, {"node_rank", p.node_rank},
                                       {"local_rank", p.local_rank}, {"host", host_name()}, {"pid", ::getpid()},
                                       {"token", token}};
            const std::string beat = key(r.round, fmt::format("beat/{}", rank));
            const std::string ck = key(r.round, fmt::format("claim/{}", rank));
            r.store->add(beat, 1);
            r.store->set(key(r.round, fmt::format("id/{}", rank)), bytes(me.dump()));
            for (;;) {
                throw_if_refused(*r.store, r.round);
                if (r.store->check({key(r.round, "ok")})) break;
                r.store->add(beat, 1);  // the keep-alive rank 0 checks before it closes the round
                // Stalled long enough to be taken for dead: take the claim back (unless someone
                // else holds it now: then that one is a second machine with our node rank).
                if (const std::string held = text(r.store->get(ck)); held != token) {
                    if (held != kEvicted + token) fail("{}", duplicate(p, rank, held));
                    claim(*r.store, r.round, p, token, o.keep_alive_timeout);
                }
                if (Clock::now() > deadline)
                    fail("the master {} did not complete the rendezvous within {:g} s ([distributed] timeout_s): are "
                         "all {} machines running `hsring run`?", where, seconds(o.timeout), p.nnodes);
                std::this_thread::sleep_for(kPoll);
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
