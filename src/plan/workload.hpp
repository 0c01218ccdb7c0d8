#pragma once
// What a run's batches look like, without torch: the samples as the drafter sees them (length,
// anchors, attention groups), packed into slots the way a target packs them (epoch 0's order,
// src/worker/core/packer.cpp) and split into micro-batches the way the drafter splits a slot
// (TorchDrafter::train_one in src/worker/torch/torch_drafter.cpp). The memory model sizes the drafter
// by the worst of these micro-batches.
//
// Anchors are drawn at random during training; the planner uses their expected positions: the
// last anchor of attention group g (blocks [g*G, min(n, (g+1)*G)) of n anchors among V valid
// positions) is the valid position of rank round(b1 * (V + 1) / (n + 1)) - 1.
#include "hsring/config.hpp"
#include "hsring/dataset.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace hsring::plan {


// One sample as the drafter trains it.
struct SampleShape {
    std::uint32_t tokens = 0;
    std::uint32_t blocks = 0;  // anchors: min(num_anchors, loss-masked positions p with p + 1 in the sample)
    std::uint64_t keys = 0;    // sum over its attention groups of the padded key length
    std::uint64_t mask = 0;    // sum over its groups of block rows x key length (the additive mask)
};

// Whole samples of one slot, at most micro_batch_tokens context tokens (one sample at least).
struct MicroBatch {
    std::uint64_t tokens = 0, samples = 0, blocks = 0, keys = 0, mask = 0;
    void add(const SampleShape& s);
};

// Where samples come from: the run's data set (loaded untruncated, so that other slot sizes can
// be planned from one load) or samples of one assumed length, every token trained.
class SampleSource {
public:
    // Throws hsring::Error naming the file (missing, bad line) and how to plan without it.
    static SampleSource from_data(const Config& cfg, const Derived& d);
    static SampleSource synthetic(std::uint64_t sample_tokens);

    // Sample shapes for this config (truncation at its max_seq_len, its anchors and blocks).
    // Synthetic sources give enough samples to fill 4 slots.
    std::vector<SampleShape> shapes(const Config& cfg, const Derived& d) const;
    std::string describe() const;
    bool is_synthetic() const { return !data_; }
    std::uint64_t synthetic_tokens() const { return synthetic_tokens_; }
    // Samples per epoch (0 for synthetic) and the host bytes of one copy of the data set as a
    // run loads it (truncated at max_seq_len: tokens, loss mask, offsets; 0 for synthetic).
    std::uint64_t samples() const;
    std::uint64_t loaded_bytes(const Derived& d) const;
    const data::Dataset* dataset() const { return data_.get(); }

private:
    std::shared_ptr<const data::Dataset> data_;
    std::filesystem::path path_;
    std::uint64_t synthetic_tokens_ = 0;
};

// The expected shape of one sample with `valid` loss-masked anchor positions (sorted).
SampleShape sample_shape(std::uint32_t tokens, std::span<const std::uint32_t> valid, std::uint64_t num_anchors,
                         std::uint64_t block_size);

struct Workload {
    std::vector<SampleShape> samples;
    std::vector<std::vector<std::uint32_t>> slots;  // epoch 0's slots: sample indices in packing order
    std::uint64_t micro_batch_tokens = 0;
    std::uint64_t max_slot_tokens = 0;              // the fullest slot
    double mean_sample_tokens = 0;
    std::uint64_t slots_per_step = 1;               // slots the drafter accumulates per optimizer step
    std::uint64_t micro_batches_per_step = 1;       // most micro-batches in one optimizer step

    std::vector<MicroBatch> micro_batches(std::size_t slot) const;
};

// Packs `samples` (synthetic: in order; else epoch 0's shuffled order) into slots.
Workload make_workload(std::vector<SampleShape> samples, bool synthetic, const Config& cfg, const Derived& d);
inline Workload make_workload(const SampleSource& source, const Config& cfg, const Derived& d) {
    return make_workload(source.shapes(cfg, d), source.is_synthetic(), cfg, d);
}


} // namespace hsring::plan
