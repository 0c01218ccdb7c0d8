#pragma once
// `hsring drill CONFIG`: a user's smoke test of exactly-once on a new box. It runs the config's
// pipeline (synthetic mode by default: no models, seconds per run) as real `hsring run`
// processes while it SIGKILLs and SIGSTOPs random workers and the supervisor and injects faults
// into them (HSRING_FAULT, src/worker/CONTRACT.md), run after run until it has dealt the faults
// asked for; then it checks every run dir as `hsring ledger verify` does and prints the faults
// survived and the samples lost and doubled. First it runs the config once without any fault:
// every drilled run must end with that run's export, byte for byte (invariant 10, docs/architecture.md; with
// GPU drafters in --mode train a difference is reported, not failed: GPU kernels are not
// bit-reproducible).
//
//   WORK/drill.toml   the config with the drill's keys (mode, name, restart policy, port, data)
//   WORK/data.jsonl   the first --samples samples of the config's data set
//   WORK/run-N/       run N's run dir (its export in run-N/drafter);  WORK/run-N.log  its supervisors' output
//                     run 0 is the unkilled reference
//
// A run must end "complete (verified)", each run dir must verify (0 lost, 0 doubled), its export
// must equal run 0's, and no run may stall (no sample trained for --stall-s while nothing is
// suspended) or outlast --timeout.
#include <cstdint>
#include <filesystem>
#include <optional>

namespace hsring::drill {

struct DrillOptions {
    std::filesystem::path config;
    std::uint32_t faults = 200;
    std::uint64_t seed = 1;
    bool train = false;                             // --mode train: the config's models (GPU machine)
    std::optional<std::filesystem::path> work_dir;  // default: a new directory in $TMPDIR (/tmp)
    std::uint64_t samples = 1000;                   // first N samples of the data set (0: all)
    double step_ms = 5;                             // synthetic: simulated compute per drafter batch
    double gap_ms = 250;                            // mean time between two faults
    double timeout_s = 900;                         // one run at most
    double stall_s = 120;                           // no progress this long is a hang
    bool keep = false;                              // keep WORK even when everything passed
    // --resize: every supervisor start of a drilled run (the first, and each after a SIGKILL) draws
    // 1..3 drafter ranks ([topology] drafters, resume rules: re-planned), with a global step of 6
    // slots that each count shares evenly; synthetic mode only.
    bool resize = false;
};

// Prints progress and the summary on stdout. Returns 0 when every fault was survived and every
// run verified, 1 when not (the reason and WORK are printed). Throws hsring::Error on a bad
// config or a work dir that cannot be made.
int run_drill(const DrillOptions& options);

} // namespace hsring::drill
