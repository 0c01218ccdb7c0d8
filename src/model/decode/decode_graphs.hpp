#pragma once
// The decode engine's fixed-shape steps: a decode step (1 token per row) and a verify step (a
// drafted block per row) of the target over its KV cache, captured once per shape as a CUDA
// graph and replayed (on the CPU, or for a model that is not graphable(), the same work runs
// directly). At batch 1 a step of a small or memory-bound model is dominated by launching its
// hundreds of kernels one by one; a replay launches them as one.
//
//   shape key: (the cache's storage of every layer, rows, capacity, n new tokens per row, key
//              window W, captured layer ids)
//   W = the row lengths + n rounded up to `bucket` positions (at most the capacity): attention
//       reads W keys per row, masked after each query's position, so one graph serves every
//       length in its bucket
//   inputs:  one [2, rows * n] int64 device buffer (tokens, positions), filled by one copy
//   outputs: the graph's own logits and captured layers, valid until the next step
//
// A cache whose storage moves (KVCache::keep_rows / append_rows) gets new graphs; the old ones
// are dropped. So generate and spec_decode use it at batch 1 (the latency case, where launches
// dominate), keeping one cache's storage from prompt to prompt. Models with MoE routing, sinks or
// FP8 weights (not TargetModel::graphable()) run forward_cached. Not thread-safe: one caller
// drives the model and its cache.
#include "model/ops/step_graphs.hpp"
#include "model/target/kv_cache.hpp"
#include "model/target/target.hpp"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace hsring::model {

class DecodeGraphs {
public:
    // `graphs` false: the steps run directly (the same fixed-shape work, without capture).
    explicit DecodeGraphs(TargetModel& model, bool graphs = true, std::int64_t bucket = 256);
    ~DecodeGraphs();
    DecodeGraphs(const DecodeGraphs&) = delete;
    DecodeGraphs& operator=(const DecodeGraphs&) = delete;

    // Whether steps go through forward_static (graphable model) and are captured (a CUDA device).
    bool fixed_shapes() const { return fixed_; }
    bool captured() const { return graphs_.capturing(); }
    std::size_t graphs() const { return graphs_.size(); }

    // tokens: n per row, row after row, at positions cache.length(r) onwards; the rows' lengths
    // grow by n. Returns logits [rows * n, vocab] of every new token (valid until the next step);
    // on_layer(i, hidden [rows * n, H]) after the step for each captured layer, as forward_cached's.
    // A model that is not graphable() runs forward_cached instead (the same results).
    at::Tensor step(const std::vector<std::int64_t>& tokens, std::int64_t n, KVCache& cache,
                    const std::vector<int>& layer_ids = {}, const TargetModel::LayerCallback& on_layer = {});

private:
    TargetModel& model_;
    bool fixed_ = false;
    std::int64_t bucket_;
    // Key: (rows, capacity, n, window, every layer's key and value storage, captured layer ids)
    StepGraphs graphs_;
};

} // namespace hsring::model
