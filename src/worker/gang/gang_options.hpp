#pragma once
// The drafter's place in the data-parallel gang, from its environment (CONTRACT.md) and config:
// who it is, where the master is, how long to wait, and what every machine must agree on.
#include "distributed/c10d_gang.hpp"
#include "worker/core/context.hpp"

namespace hsring::worker {

distributed::GangOptions gang_options(const Context& ctx);

} // namespace hsring::worker
