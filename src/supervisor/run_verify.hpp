#pragma once
// `hsring ledger verify` as a function: is every sample in the weights of the latest checkpoint
// exactly once per epoch? Replays every drafter rank's train log of every machine's run dir
// against the oldest `checkpoints/latest` of them (include/hsring/train_log.hpp), with the data
// set's facts from run.json. Used by the CLI and by `hsring drill`.
#include "hsring/train_log.hpp"
#include "supervisor/run_files.hpp"

#include <filesystem>
#include <map>
#include <utility>
#include <vector>

namespace hsring::supervisor {

struct RunVerification {
    std::map<std::uint32_t, std::pair<RunFiles, RunRecord>> machines;  // by node rank
    std::size_t logs = 0;
    LineageReport report;
    // Every machine's run ended complete (verified by its supervisor) with no [train] max_steps:
    // then a missing sample is lost, not "not trained yet".
    bool finished = false;
};

// Throws hsring::Error naming what is missing or inconsistent (a machine's run dir, run.json, a
// checkpoint, a train log).
RunVerification verify_run_dirs(const std::vector<std::filesystem::path>& dirs);

} // namespace hsring::supervisor
