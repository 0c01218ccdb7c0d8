#pragma once
// The target's key/value cache for generation: one row per sequence, each with its own length.
//
// Per layer, keys and values are [rows, capacity, Hkv, D] in the compute dtype on the model's
// device. Row r holds its sequence's positions 0..length(r)-1; what lies beyond is zero or stale
// (left by a crop) and is never attended:
//
//   row 0 | k0 k1 k2 k3 k4 .  .  .  |  length 5
//   row 1 | k0 k1 .  .  .  .  .  .  |  length 2
//   row 2 | k0 k1 k2 k3 k4 k5 k6 k7 |  length 8 = capacity
//
// Padded, not packed: a decode step adds one token per row, and with every row padded to one
// capacity the step's keys land with one index_copy and all rows attend in one SDPA call (a
// key-length mask per row) with plain LibTorch ops on any device; a packed or paged cache would
// need kernels LibTorch does not expose (flash_attn_with_kvcache, paged attention). The price:
// `capacity` positions of memory per row, and attention over the longest row of the batch
// (masked keys). Crop is a length change; rows of finished sequences are dropped (keep_rows) so
// they stop costing compute.
//
// Not thread-safe: one caller drives a cache (and the model forward that extends it).
#include "hsring/model_shape.hpp"
#include "model/ops/attention.hpp"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hsring::model {

class KVCache {
public:
    // `rows` empty rows of `capacity` positions for a model of `shape`.
    KVCache(const ModelShape& shape, std::int64_t rows, std::int64_t capacity, at::Device device,
            at::ScalarType dtype);

    std::int64_t rows() const { return static_cast<std::int64_t>(lengths_.size()); }
    std::int64_t capacity() const { return capacity_; }
    std::int64_t num_layers() const { return static_cast<std::int64_t>(keys_.size()); }
    std::int64_t length(std::int64_t row) const;
    const std::vector<std::int64_t>& lengths() const { return lengths_; }
    at::Device device() const { return device_; }
    at::ScalarType dtype() const { return dtype_; }

    // Forgets the positions >= `length` of `row` (length <= length(row)): speculative decoding
    // keeps the accepted prefix of a verified block. O(1): later tokens overwrite the stale ones.
    void crop(std::int64_t row, std::int64_t length);
    // Counts n more positions of `row` as held (their keys/values written by a forward that does
    // not commit lengths itself: TargetModel::forward_static).
    void grow(std::int64_t row, std::int64_t n);
    // Keeps only the given rows, in that order (drops finished sequences): one copy of them.
    void keep_rows(const std::vector<std::int64_t>& rows);
    // Appends the rows of `other` (same model, capacity, device and dtype) after this cache's.
    void append_rows(const KVCache& other);

    // Layer `layer`'s storage, [rows, capacity, Hkv, D].
    const at::Tensor& keys(std::int64_t layer) const { return keys_.at(static_cast<std::size_t>(layer)); }
    const at::Tensor& values(std::int64_t layer) const { return values_.at(static_cast<std::size_t>(layer)); }

private:
    friend class CacheExtension;
    std::int64_t capacity_ = 0, kv_heads_ = 0, head_dim_ = 0, kv_repeat_ = 1;
    at::Device device_{at::kCPU};
    at::ScalarType dtype_ = at::kFloat;
    std::vector<at::Tensor> keys_, values_;
    std::vector<std::int64_t> lengths_;
};

// One forward's new tokens: counts[r] tokens for row r, packed row after row (T = sum counts),
// at positions length(r) .. length(r) + counts[r] - 1. Built once per forward, shared by every
// layer: the positions, where each token's key goes, and the attention mask.
class CacheExtension {
public:
    // Throws hsring::Error naming `what` when counts do not fit the cache (one per row, each row
    // within capacity, at least one token in all).
    CacheExtension(KVCache& cache, std::vector<std::int64_t> counts, const std::string& what);

    std::int64_t total() const { return cu_.back(); }
    const std::vector<std::int64_t>& counts() const { return counts_; }
    // Row offsets into the packed tokens, [rows + 1].
    const std::vector<std::int64_t>& cu() const { return cu_; }
    // Position of every new token, [T] int64 on the cache's device.
    const at::Tensor& positions() const { return positions_; }

    // Stores layer `layer`'s new keys and values k, v [T, Hkv, D] and returns the attention of
    // q [T, Hq, D] over each row's cached prefix and its own new tokens (causal), [T, Hq, D].
    // sinks [Hq] defined (gpt-oss): one extra logit per head in every softmax, an explicit path,
    // and window > 0 only the keys at positions > the query's - window (its sliding layers).
    at::Tensor attend(std::int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      double scale, std::int64_t window = 0, const at::Tensor& sinks = {}) const;
    // Adds the counts to the rows' lengths; call once, after the last layer.
    void commit() const;

private:
    KVCache& cache_;
    std::vector<std::int64_t> counts_, cu_;
    std::int64_t max_new_ = 0, max_keys_ = 0;
    bool fresh_ = false;     // every row was empty: a plain packed causal attention (prefill)
    PackedSequences packed_;  // fresh_ only
    at::Tensor positions_;   // [T]
    at::Tensor slot_;        // [T]: row * capacity + position, where each new key goes
    at::Tensor pad_index_;   // [T]: row * max_new + i, the token's place in the padded queries
    // [rows, 1, kv_repeat * max_new, max_keys] bool, true = visible: the query heads that share a
    // kv head are stacked along the query axis (GQA without repeating keys).
    at::Tensor mask_;
};

} // namespace hsring::model
