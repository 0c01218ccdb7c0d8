#pragma once
// `--config FILE` for the model benchmarks: a run's shapes and its batches, packed exactly as
// `hsring plan` packs them (src/plan/workload.hpp), so `hsring plan --measure` compares its
// prediction with a measurement of the same slots. Samples come from [data] path (truncated
// like the run) or, with --sample-tokens N, are N random tokens each, every token trained.
#include "hsring/config.hpp"
#include "hsring/error.hpp"
#include "plan/plan.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace hsring::bench {

struct SlotData {
    std::vector<std::int32_t> tokens;
    std::vector<std::uint8_t> loss_mask;
    std::vector<std::uint64_t> lengths;
    std::uint64_t samples() const { return lengths.size(); }
};

struct ConfigBatches {
    Config cfg;
    Derived derived;
    plan::Plan plan;  // the planner's workload and its worst slot

    // The samples of epoch 0's slot `s`.
    SlotData slot(std::size_t s) const;

    plan::SampleSource source;
};

inline ConfigBatches load_config_batches(const std::string& file, std::uint64_t sample_tokens) {
    Config cfg = load_config(file);
    Derived d = derive(cfg);
    plan::SampleSource source =
        sample_tokens ? plan::SampleSource::synthetic(sample_tokens) : plan::SampleSource::from_data(cfg, d);
    plan::Capacity none;
    plan::Planner planner(cfg, source, none);
    plan::Plan p = planner.plan();
    return ConfigBatches{std::move(cfg), std::move(d), std::move(p), std::move(source)};
}

inline SlotData ConfigBatches::slot(std::size_t s) const {
    SlotData out;
    const auto& ids = plan.workload.slots.at(s);
    const data::Dataset* ds = source.dataset();
    std::uint64_t x = 0x9E3779B97F4A7C15ull * (s + 1);
    for (auto i : ids) {
        const std::uint64_t len = plan.workload.samples[i].tokens;
        out.lengths.push_back(len);
        if (ds) {
            auto t = ds->tokens(i).first(len);
            auto m = ds->loss_mask(i).first(len);
            out.tokens.insert(out.tokens.end(), t.begin(), t.end());
            out.loss_mask.insert(out.loss_mask.end(), m.begin(), m.end());
        } else {
            for (std::uint64_t k = 0; k < len; ++k) {
                x += 0x9E3779B97F4A7C15ull;  // splitmix64: random ids below the mask token's row
                std::uint64_t z = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
                z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
                z ^= z >> 31;
                out.tokens.push_back(static_cast<std::int32_t>(z % static_cast<std::uint64_t>(derived.target.vocab_size - 1)));
                out.loss_mask.push_back(1);
            }
        }
    }
    return out;
}

} // namespace hsring::bench
