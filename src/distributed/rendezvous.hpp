#pragma once
// How the drafter ranks of a run find each other, over c10d's TCPStore (no protocol of ours on
// the wire). Global rank 0 serves the store at [distributed] master_addr:master_port; the others
// connect (retrying until [distributed] timeout_s).
//
// The store outlives no process but rank 0, and a gang is restarted as a whole after any rank
// died, so every (re)start is a new *round* in the store:
//   rank 0      round = add("hsring/round", 1); publish its identity; wait until every rank of
//               the world published one; compare (a difference is a user error naming the key
//               and the machine); write "ok" (or "error" with the message)
//   rank k > 0  read the current round; a round that is already formed (or failed) belongs to
//               an earlier gang: wait for a newer one; claim global rank k in it (a rank claimed
//               twice = two machines with the same node rank); publish the identity; wait for
//               "ok" or "error"
//   all         create the process group under the prefix "hsring/r<round>/pg", a first
//               collective, then rank 0 marks the round formed.
// A rank that does not join within the timeout is named in the error (its machine and rank).
#include "hsring/free_port.hpp"
#include "hsring/worker_contract.hpp"

#include <nlohmann/json.hpp>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace hsring::distributed {

struct RendezvousOptions {
    GangPlace place;
    std::string master_addr;
    std::uint16_t master_port = 0;
    std::chrono::milliseconds timeout{600000};
    nlohmann::json identity;   // hsring::run_identity(): compared with the master's
};

struct Rendezvous {
    c10::intrusive_ptr<c10d::Store> store;  // the TCPStore (kept alive: rank 0 serves it)
    c10::intrusive_ptr<c10d::Store> group_store;  // prefixed for the process group of this round
    std::int64_t round = 0;
    void mark_formed();        // rank 0, after the first collective
};

// Throws hsring::Error: unreachable master, ranks missing after the timeout, identities that
// differ (the message names every differing key), a rank claimed twice.
Rendezvous rendezvous(const RendezvousOptions& options);

// For gangs that tests and benchmarks start on one host (hsring/free_port.hpp).
using hsring::free_loopback_port;

} // namespace hsring::distributed
