#pragma once
// Fault injection for tests and `hsring drill` (documented in src/worker/CONTRACT.md):
//
//   HSRING_FAULT=<who>:<point>:<n>[:<action>][,<who>:<point>:<n>[:<action>]...]
//
// <who> is a worker name (target.0, drafter.1), a role pattern (target.*, drafter.*), * or
// supervisor; the n-th time this process passes <point>, <action> happens:
//   throw  (default) an exception, as if the operation failed (a CUDA OOM in a target's forward)
//   kill   SIGKILL to itself, right there
//   hold   sleep there until killed (a test kills it while it holds what it holds)
//   int    SIGINT to itself (a Ctrl-C at that instant)
// Points: target write; drafter restore (at start, the gang formed), stage, train, checkpoint
// (after the weights are written, before the commit), commit (after the commit, before the train
// log's K record and make_durable);
// supervisor rebuild (once per sample marked while a new ledger is built from the checkpoint).
// A bad HSRING_FAULT is an hsring::Error at the first point. Without HSRING_FAULT a point costs
// one relaxed load.
#include <stdexcept>
#include <string>

namespace hsring::fault {

// What throw raises (a std::runtime_error, not an hsring::Error: a worker exits 1 for it).
struct Injected : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Who this process is for matching <who> (default: $HSRING_WORKER_NAME).
void set_process_name(const std::string& name);
// A fault point (see above).
void point(const char* name);
// A point where the caller can make numbers non-finite (target `hidden`, drafter `grad`): true on
// the pass where a fault with action `nan` fires there (other actions act as at point()).
bool poison(const char* name);

} // namespace hsring::fault
