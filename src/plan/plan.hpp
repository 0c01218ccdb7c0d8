#pragma once
// `hsring plan`: a config's predicted peak memory per GPU and for host RAM against what the
// machine holds, and when something does not fit, the knobs that make it fit (each value found
// by planning the changed config again, not guessed).
#include "hsring/config.hpp"
#include "plan/capacity.hpp"
#include "plan/memory_model.hpp"
#include "plan/workload.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hsring::plan {

struct GpuPlan {
    int index = 0;
    std::vector<WorkerMemory> workers;  // several with [topology] allow_shared_gpus: they add up
    std::optional<std::uint64_t> capacity;
    bool on_machine = true;             // false: the machine has fewer GPUs

    std::uint64_t predicted() const;
    std::uint64_t allocated() const;
    // Parts summed by name over the workers, in first-seen order.
    std::vector<std::pair<std::string, std::uint64_t>> parts() const;
    std::vector<std::string> worker_names() const;
    bool fits() const { return on_machine && capacity && predicted() <= *capacity; }
};

struct HostPlan {
    HostMemory memory;
    std::optional<std::uint64_t> capacity;
    bool fits() const { return capacity && memory.total() <= *capacity; }
};

struct Plan {
    Config cfg;
    Derived derived;
    std::string samples;            // where the sample shapes came from
    Workload workload;
    MicroBatch worst;               // the drafter's most memory-hungry micro-batch
    std::size_t worst_slot = 0;     // the slot that holds it (epoch 0's packing)
    std::uint64_t target_tokens = 0;
    std::vector<GpuPlan> gpus;      // by index
    HostPlan host;
    std::vector<WorkerMemory> cpu_workers;  // placed on "cpu": counted in host RAM

    // Every GPU the config uses has a known capacity.
    bool gpu_capacity_known() const;
    bool fits() const;
    const GpuPlan* gpu(int index) const;
};

// What [train] recompute = "layers" costs, said with the suggestion (BENCHMARKS.md, one H200:
// 6.79 -> 5.52 samples/s at 2 x 3,072 tokens, 4.04 -> 3.23 at 16,384, 2.99 -> 2.44 at 32,768).
inline constexpr const char* kRecomputeCost =
    " (costs throughput: each layer's forward runs again in backward, ~18-20% fewer samples/s measured on an H200)";

struct Suggestion {
    std::string knob;     // "[train] micro_batch_tokens"
    std::string value;    // as written in TOML: 8192, "12GiB", [0, 0]
    std::string current;
    std::string effect;   // what the re-planned config predicts for what did not fit
    bool fits_all = false;
};

class Planner {
public:
    // Resolves the target model's shape once. Throws hsring::Error.
    Planner(Config cfg, SampleSource source, Capacity capacity);

    Plan plan() const { return plan(cfg_); }
    // The same machine and samples for a changed config (throws where derive() refuses it).
    Plan plan(const Config& cfg) const;
    // For each knob that helps, the value closest to the current one that makes what did not
    // fit in `p` fit. Empty when everything fits.
    std::vector<Suggestion> suggestions(const Plan& p) const;

    const Config& config() const { return cfg_; }
    const ModelShape& shape() const { return shape_; }
    const Capacity& capacity() const { return capacity_; }
    const SampleSource& source() const { return source_; }

private:
    const std::vector<SampleShape>& shapes(const Config& cfg, const Derived& d) const;

    Config cfg_;
    ModelShape shape_;
    SampleSource source_;
    Capacity capacity_;
    // Sample shapes per (max_seq_len, num_anchors, block_size): knobs reuse them.
    mutable std::map<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>, std::vector<SampleShape>> shape_cache_;
};

// "drafter.0", "target.2": the worker names `hsring run` uses, in topology order.
std::vector<std::pair<std::string, Place>> worker_places(const Config& cfg);

} // namespace hsring::plan
