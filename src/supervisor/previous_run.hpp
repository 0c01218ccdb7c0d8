#pragma once
// Taking over from an earlier supervisor of the same run. When a supervisor dies, its workers
// get SIGTERM (PR_SET_PDEATHSIG) and finish their unit of work before they exit: a target
// commits the slot it writes, the drafter trains what it holds and checkpoints. The next
// supervisor must let them finish before it starts new workers: two drafters of one rank at
// once would both write the train log and the ledger's consumption records of that rank.
#include "supervisor/console.hpp"
#include "supervisor/run_files.hpp"

#include "hsring/ledger.hpp"
#include "hsring/ring.hpp"
#include "hsring/status_board.hpp"

#include <cstdint>
#include <optional>

namespace hsring::supervisor {

// A run dir whose checkpoint was trained on one data set is never resumed on another (docs/architecture.md
// invariant 8): its ledger positions would name other samples. With a checkpoint in `files`,
// fails unless the previous record (run.json) names the same data set (fingerprint, samples),
// order (seed, shuffle) and machine (node_rank of nnodes) as `now`; the epochs may change.
void check_same_data(const std::optional<RunRecord>& previous, const RunFiles& files, const RunRecord& now);

// Fails if the supervisor of `record` is still alive (a run directory has one supervisor).
void check_previous_supervisor(const RunRecord& record);

// Waits (up to `timeout_s`, then SIGKILL) for the worker processes of `record` that are still
// alive. Returns how many there were.
std::size_t wait_for_previous_workers(const RunRecord& record, double timeout_s, Console& console);

// The largest incarnation any earlier process of this ring used: from run.json, the status
// board's worker stats and the owners of the ring's slots. New incarnations start above it so that
// (pid, incarnation) never repeats within a ring (src/worker/CONTRACT.md).
std::uint32_t max_incarnation_seen(const std::optional<RunRecord>& record, const Ring& ring,
                                   const StatusBoard& status);

} // namespace hsring::supervisor
