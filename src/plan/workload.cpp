// A run's batches without torch (see workload.hpp).
#include "plan/workload.hpp"

#include "hsring/slot_plan.hpp"
#include "hsring/attention_keys.hpp"
#include "hsring/dataset_options.hpp"
#include "hsring/error.hpp"
#include "hsring/units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace hsring::plan {

void MicroBatch::add(const SampleShape& s) {
    tokens += s.tokens;
    samples += 1;
    blocks += s.blocks;
    keys += s.keys;
    mask += s.mask;
}

SampleShape sample_shape(std::uint32_t tokens, std::span<const std::uint32_t> valid, std::uint64_t num_anchors,
                         std::uint64_t block_size) {
    SampleShape s;
    s.tokens = tokens;
    const std::uint64_t v = valid.size();
    const std::uint64_t n = std::min<std::uint64_t>(num_anchors, v);
    s.blocks = static_cast<std::uint32_t>(n);
    for (std::uint64_t b0 = 0; b0 < n; b0 += kAttentionGroupBlocks) {
        const std::uint64_t b1 = std::min(n, b0 + kAttentionGroupBlocks);
        const std::uint64_t rows = (b1 - b0) * block_size;
        // Expected rank of the group's last anchor among the valid positions (order statistic).
        const double rank = std::round(static_cast<double>(b1) * static_cast<double>(v + 1) / static_cast<double>(n + 1)) - 1;
        const auto idx = static_cast<std::size_t>(std::clamp(rank, 0.0, static_cast<double>(v - 1)));
        // The drafter worker keeps the default layout (hsring/attention_keys.hpp).
        const auto key_len =
            static_cast<std::uint64_t>(padded_key_len(static_cast<std::int64_t>(valid[idx] + rows), kAttentionKeyPad));
        s.keys += key_len;
        s.mask += rows * key_len;
    }
    return s;
}

SampleSource SampleSource::from_data(const Config& cfg, const Derived& d) {
    const std::filesystem::path path = cfg.resolve(cfg.data.path);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        fail("{}: [data] path {} does not exist: the drafter's memory depends on the samples' lengths; prepare the "
             "data first, or plan for samples of an assumed length with --sample-tokens N",
             cfg.file.string(), path.string());
    SampleSource s;
    data::DatasetOptions o = data::dataset_options(cfg, d);
    o.max_seq_len = 0;  // truncation is applied per planned config (shapes())
    s.data_ = std::make_shared<const data::Dataset>(data::Dataset::load(path, o));
    s.path_ = path;
    return s;
}

SampleSource SampleSource::synthetic(std::uint64_t sample_tokens) {
    if (sample_tokens == 0) fail("--sample-tokens must be at least 1");
    SampleSource s;
    s.synthetic_tokens_ = sample_tokens;
    return s;
}

std::vector<SampleShape> SampleSource::shapes(const Config& cfg, const Derived& d) const {
    const std::uint64_t anchors = cfg.train.num_anchors, block = cfg.drafter.block_size;
    std::vector<SampleShape> out;
    std::vector<std::uint32_t> valid;
    if (!data_) {
        const auto len = static_cast<std::uint32_t>(std::min(synthetic_tokens_, d.max_seq_len));
        valid.resize(len > 0 ? len - 1 : 0);
        std::iota(valid.begin(), valid.end(), 0u);  // every token trained
        const SampleShape one = sample_shape(len, valid, anchors, block);
        const std::uint64_t per_slot = std::clamp<std::uint64_t>(cfg.ring.slot_tokens / std::max<std::uint32_t>(len, 1), 1,
                                                                 d.max_samples_per_slot);
        out.assign(per_slot * 4, one);
        return out;
    }
    out.reserve(data_->size());
    for (std::size_t i = 0; i < data_->size(); ++i) {
        const auto len = static_cast<std::uint32_t>(std::min<std::uint64_t>(data_->length(i), d.max_seq_len));
        const auto mask = data_->loss_mask(i);
        valid.clear();
        for (std::uint32_t p = 0; p + 1 < len; ++p)
            if (mask[p]) valid.push_back(p);
        out.push_back(sample_shape(len, valid, anchors, block));
    }
    return out;
}

std::string SampleSource::describe() const {
    if (!data_) return fmt::format("assumed samples of {} tokens, every token trained (--sample-tokens)", synthetic_tokens_);
    return fmt::format("data set {}: {} samples, {} tokens, {} trained", path_.lexically_normal().string(),
                       format_count(data_->size()), format_count(data_->total_tokens()),
                       format_count(data_->loss_tokens()));
}

std::uint64_t SampleSource::samples() const { return data_ ? data_->size() : 0; }

std::uint64_t SampleSource::loaded_bytes(const Derived& d) const {
    if (!data_) return 0;
    std::uint64_t tokens = 0;
    for (std::size_t i = 0; i < data_->size(); ++i) tokens += std::min<std::uint64_t>(data_->length(i), d.max_seq_len);
    // int32 tokens + uint8 loss mask per token, one uint64 offset per sample (dataset.hpp).
    return tokens * 5 + (data_->size() + 1) * 8;
}

std::vector<MicroBatch> Workload::micro_batches(std::size_t slot) const {
    const auto& ids = slots[slot];
    std::vector<std::uint64_t> lengths;
    lengths.reserve(ids.size());
    for (auto i : ids) lengths.push_back(samples[i].tokens);
    std::vector<MicroBatch> out;
    for (auto [first, last] : split_micro_batches(lengths, micro_batch_tokens)) {
        MicroBatch m;
        for (std::size_t k = first; k < last; ++k) m.add(samples[ids[k]]);
        out.push_back(m);
    }
    return out;
}

Workload make_workload(std::vector<SampleShape> samples, bool synthetic, const Config& cfg, const Derived& d) {
    Workload w;
    w.samples = std::move(samples);
    w.micro_batch_tokens = cfg.train.micro_batch_tokens;
    if (w.samples.empty()) fail("{}: the data set has no samples", cfg.file.string());
    // Packer::pack: samples in epoch order until the next one does not fit the slot's tokens or
    // its sample count.
    const auto order = synthetic
                           ? [&] {
                                 std::vector<std::uint32_t> o(w.samples.size());
                                 std::iota(o.begin(), o.end(), 0u);
                                 return o;
                             }()
                           : data::epoch_order(w.samples.size(), cfg.run.seed, 0, cfg.data.shuffle);
    std::vector<std::uint32_t> slot;
    std::uint64_t slot_tokens = 0, total = 0;
    auto close = [&] {
        if (slot.empty()) return;
        w.max_slot_tokens = std::max(w.max_slot_tokens, slot_tokens);
        w.slots.push_back(std::move(slot));
        slot.clear();
        slot_tokens = 0;
    };
    for (std::uint32_t i : order) {
        const std::uint64_t t = w.samples[i].tokens;
        if (!slot.empty() && (slot_tokens + t > cfg.ring.slot_tokens || slot.size() >= d.max_samples_per_slot)) close();
        slot.push_back(i);
        slot_tokens += t;
        total += t;
    }
    close();
    w.mean_sample_tokens = static_cast<double>(total) / static_cast<double>(w.samples.size());
    // A drafter rank steps after [train] slots_per_rank slots (Derived, drafter_loop.cpp).
    std::uint64_t slots_in_step = 0, mbs_in_step = 0;
    for (std::size_t s = 0; s < w.slots.size(); ++s) {
        ++slots_in_step;
        mbs_in_step += w.micro_batches(s).size();
        if (slots_in_step >= d.slots_per_rank || s + 1 == w.slots.size()) {
            w.slots_per_step = std::max(w.slots_per_step, slots_in_step);
            w.micro_batches_per_step = std::max(w.micro_batches_per_step, mbs_in_step);
            slots_in_step = mbs_in_step = 0;
        }
    }
    return w;
}

} // namespace hsring::plan
