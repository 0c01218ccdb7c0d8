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
//   nan    only at hidden and grad: poison() returns true, and the caller makes that pass's
//          numbers NaN (a target's captured hidden states, a drafter's gradient)
// Points: target write, hidden (a slot's hidden states captured, before they are written);
// drafter restore (at start, the gang formed), stage, train, grad (a gradient computed, before
// it is summed and applied), checkpoint (after the weights are written, before the commit),
// commit (after the commit, before the train log's K record and make_durable), done (the run marked
// done, before the drafter exits);
// supervisor rebuild (once per sample marked while a new ledger is built from the checkpoint).
//
// A misspelled worker, point or action would never fire and a test or drill would pass without
// its fault: configure() refuses any of them at start with one message listing what is valid.
// Without HSRING_FAULT a point costs one relaxed load.
#include <cstdint>
#include <stdexcept>
#include <string>

namespace hsring::fault {

// What throw raises (a std::runtime_error, not an hsring::Error: a worker exits 1 for it).
struct Injected : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The workers of a machine ([topology]): target.0..target.{targets-1}, drafter.0..drafter.{drafters-1}.
struct Topology {
    std::uint32_t targets = 0, drafters = 0;
};

// Checks an HSRING_FAULT value: its syntax, every <who> a worker of `topology`, a pattern or
// supervisor, every <point> one that <who> passes, every action known (nan only where the point
// takes it). Throws hsring::Error naming the item and listing what is valid.
void validate(const std::string& spec, const Topology& topology);

// This process is `name` (a worker name, or "supervisor") of `topology`: reads $HSRING_FAULT and
// validates all of it now (throws hsring::Error), so a bad spec stops the start, not a later pass.
void configure(const std::string& name, const Topology& topology);

// Who this process is for matching <who> (default: $HSRING_WORKER_NAME); $HSRING_FAULT is read at
// the first point and checked without a topology (an out-of-range rank is not seen).
void set_process_name(const std::string& name);

// A fault point (see above). A nan fault is never configured here (validate() allows it only at
// points that call poison()).
void point(const char* name);
// A point where the caller can make numbers non-finite (target `hidden`, drafter `grad`): true on
// the pass where a fault with action `nan` fires there (other actions act as at point()).
bool poison(const char* name);

// A fault point whose fault may be `nan`: counts passes like point() and returns true on the pass
// where a nan fault for `name` fires (the caller then makes that pass's numbers NaN); other
// actions happen as in point(). Points: hidden (targets), grad (drafters).
bool poison(const char* name);

} // namespace hsring::fault
