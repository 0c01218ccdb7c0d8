#pragma once
// `hsring plan --measure`: a few target batches and drafter steps at the config's shapes, run by
// the benchmark programs as child processes (`hsring-bench target|drafter --config CFG --json`;
// they link LibTorch and CUDA, `hsring` does not), then
//   - measured vs predicted peak memory of a target and a drafter (torch's allocated peak, the
//     same count the plan predicts for the same batch and slots),
//   - the split of the machine's GPUs between targets and data-parallel drafters that trains
//     the most tokens per second: min(targets x target tok/s, drafter tok/s x sum of scaling^k
//     over the drafter ranks k = 0..d-1), and the trained samples/s it gives.
#include "plan/plan.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hsring::plan {

// Each added data-parallel drafter rank adds this fraction of one drafter's rate (assumed until
// measured with several ranks).
inline constexpr double kDrafterScaling = 0.95;

struct MeasureOptions {
    double seconds = 20;
    std::string device = "cuda";                  // "cpu": a smoke run of the path
    std::optional<std::uint64_t> sample_tokens;   // forwarded to the benchmarks
    std::optional<std::uint64_t> gpus;            // GPUs to split (default: nvidia-smi's count)
};

struct BenchRun {
    std::string command;
    bool ok = false;
    std::string error;       // why not ok: exit status and the tail of its stderr
    nlohmann::json result;   // its JSON line
};

struct Split {
    std::uint64_t targets = 0, drafters = 0;
    double target_tokens_per_s = 0, drafter_tokens_per_s = 0;  // the two sides' capacities
    double tokens_per_s = 0;                                   // the smaller one
    double samples_per_s = 0;
};

struct Measurement {
    std::string device;
    BenchRun target, drafter;
    double target_tokens_per_s = 0;    // one target process
    double drafter_tokens_per_s = 0;   // one drafter: trained context tokens per second of step time
    double drafter_samples_per_s = 0;
    double mean_sample_tokens = 0;     // of the data the plan uses
    std::uint64_t target_measured_bytes = 0, target_predicted_bytes = 0;    // torch allocated peaks
    std::uint64_t drafter_measured_bytes = 0, drafter_predicted_bytes = 0;
    std::uint64_t target_batch_tokens = 0;
    std::uint64_t gpus = 0;
    std::string gpus_source;
    std::vector<Split> splits;
    std::optional<Split> best;
    bool ok() const { return target.ok && drafter.ok; }
};

// Every split of `gpus` GPUs into >= 1 target and >= 1 drafter, with its rates.
std::vector<Split> gpu_splits(std::uint64_t gpus, double target_tokens_per_s, double drafter_tokens_per_s,
                              double mean_sample_tokens, double scaling = kDrafterScaling);
// The split with the highest trained tokens/s (fewer target GPUs on a tie).
std::optional<Split> best_split(const std::vector<Split>& splits);

// The GPU a role is measured on: its first place's, or GPU 0 where this machine has no such GPU
// (`physical`: the GPUs nvidia-smi shows; not --gpus, which may plan a larger node than this one).
int measure_gpu(const std::vector<Place>& places, std::optional<std::uint64_t> physical);

// Throws hsring::Error when the device is cuda and nvidia-smi lists no GPU (the message says so
// and what to do instead).
Measurement measure(const Planner& planner, const Plan& plan, const MeasureOptions& o);

std::string format_measurement(const Measurement& m);
nlohmann::json measurement_json(const Measurement& m);

} // namespace hsring::plan
