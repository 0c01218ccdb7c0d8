#pragma once
// How the drafter ranks of a run find each other, over c10d's TCPStore (no protocol of ours on
// the wire). Global rank 0 serves the store at [distributed] master_addr:master_port; the others
// connect (retrying until [distributed] timeout_s).
//
// The store outlives no process but rank 0, and a gang is restarted as a whole after any rank
// died, so every (re)start is a new *round* in the store (torchelastic's rendezvous has the same
// shape: rounds, keep-alives, a closed state):
//   rank 0      round = add("hsring/round", 1); publish its identity (id/0); wait until every
//               rank of the world joined under a claim it still holds and beats (a rank whose
//               keep-alive stands still for keep_alive_timeout died after joining: its claim is
//               evicted and its place waited for again); write "ok" (closed) or "error" (the
//               message: a rank that does not join in time, machines that disagree)
//   rank k > 0  read the current round; a closed, formed or failed round belongs to an earlier
//               gang: wait for a newer one; compare its identity with rank 0's before anything
//               else (machines that disagree on the number of machines or drafters per machine
//               would compute different global ranks): a difference names the key and both
//               values, rank 0 refuses the round with it; claim global rank k (compare-and-set
//               of a token unique to the process); a claim held by a process whose keep-alive
//               stands still for keep_alive_timeout is a dead one's: taken over; one that keeps
//               beating is a second live machine with the same node rank: a user error; publish
//               the identity; beat while waiting for "ok" or "error"
//   all         create the process group under the prefix "hsring/r<round>/pg", a first
//               collective, then rank 0 marks the round formed; ranks k > 0 keep beating while
//               the gang lives (keep_beating), so that a second machine with the same node rank
//               that arrives while the gang trains is told so at once: the formed round's claim
//               of its rank is held by a process whose keep-alive moves.
// A rank that does not join within the timeout is named in the error (its machine and rank).
#include "hsring/free_port.hpp"
#include "hsring/worker_contract.hpp"

#include <nlohmann/json.hpp>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace hsring::distributed {

struct RendezvousOptions {
    GangPlace place;
    std::string master_addr;
    std::uint16_t master_port = 0;
    std::chrono::milliseconds timeout{600000};
    nlohmann::json identity;   // hsring::run_identity(): compared with the master's
    // A claimant whose keep-alive does not move for this long is taken for dead (it beats every
    // 50 ms while it waits in the rendezvous).
    std::chrono::milliseconds keep_alive_timeout{3000};
};

struct Rendezvous {
    c10::intrusive_ptr<c10d::Store> store;  // the TCPStore (kept alive: rank 0 serves it)
    c10::intrusive_ptr<c10d::Store> group_store;  // prefixed for the process group of this round
    std::int64_t round = 0;
    void mark_formed();        // rank 0, after the first collective
    // Ranks k > 0, once the gang formed: beat the round's keep-alive of `global_rank` from a thread
    // until this object dies (TCPStore serialises its operations; a master that is gone ends the
    // beating quietly: the gang's collectives report it).
    void keep_beating(std::uint32_t global_rank);
    // Declared last: stopped and joined before the store it uses is released.
    std::unique_ptr<std::jthread> beating;
};

// Throws hsring::Error: unreachable master, ranks missing after the timeout, identities that
// differ (the message names every differing key and both values), a rank claimed by two live
// processes (two machines with the same node rank).
Rendezvous rendezvous(const RendezvousOptions& options);

// For gangs that tests and benchmarks start on one host (hsring/free_port.hpp).
using hsring::free_loopback_port;

} // namespace hsring::distributed
