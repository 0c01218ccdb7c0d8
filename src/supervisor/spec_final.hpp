#pragma once
// The real acceptance length tau of a complete run's export ([eval] spec_prompts): after every
// worker has exited (their memory is free), `hsring-model spec-decode EXPORT --target MODEL
// --prompts FILE --json` on the first target's device, greedy, with the run's stop tokens. Its
// result is metrics.jsonl's last row, {"step": N, "spec": {"tau", "acceptance_per_position",
// "step", "prompts", ..., "final": true}} (and TensorBoard's spec/ run), and goes into the run's
// last line. During training target.0 measures the committed checkpoints the same way
// (src/worker/torch/spec_probe.hpp).
#include "hsring/config.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace hsring::supervisor {

class Console;

// The "spec" object of a metrics row from spec-decode's JSON: tau, acceptance per drafted
// position (the share of verify steps whose first k drafts were all accepted), prompts, verify
// steps, new tokens, lossless, speedup.
nlohmann::json spec_summary(const nlohmann::json& spec_decode, std::uint64_t step, bool final);

// The "spec" object of the last tau row in RUN_DIR/metrics.jsonl (its last 64 KiB), null when
// there is none (for `hsring status`).
nlohmann::json last_tau(const std::filesystem::path& metrics);

// Runs the measurement and appends its row; nullopt (with a warning saying why) when it failed:
// the run is complete either way.
std::optional<nlohmann::json> measure_final_tau(const Config& cfg, const Derived& d, std::uint64_t step,
                                                Console& console);

} // namespace hsring::supervisor
