#pragma once
// gpt-oss's attention over packed sequences: causal, optionally within a sliding window (key j is
// visible to query i iff j <= i and j > i - window, transformers' sliding_window_overlay), with
// per-head attention sinks: one learned logit per query head joins every query's softmax and takes
// probability mass without contributing a value (transformers' gpt-oss eager_attention_forward).
//
// This is the exact reference path in ATen ops, one sequence at a time (CPU, and any device). The
// GPU path it is meant to check: flash varlen with its window and log-sum-exp, the sink applied
// after as out * sigmoid(lse - sink) (softmax over [scores, sink] = softmax(scores) * Z/(Z + e^sink)).
#include "model/ops/attention.hpp"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace hsring::model {

// q [T, Hq, D], k and v [T, Hkv, D] (Hq a multiple of Hkv), sinks [Hq], cu_seqlens: S+1 host
// offsets; window 0 = full causal attention. Returns [T, Hq, D] in q's dtype.
at::Tensor sink_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                          const std::vector<std::int64_t>& cu_seqlens, std::int64_t window, double scale);

// The same over a packed batch on the fastest path: on CUDA in bf16/fp16 the flash varlen kernel
// (its window: keys i - window + 1 .. i) and its log-sum-exp, each row then scaled by
// sigmoid(lse - sink) in fp32 (the probability mass the sink leaves to the keys); else the exact
// sink_attention above.
at::Tensor packed_sink_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& sinks, const PackedSequences& seqs, std::int64_t window,
                                 double scale);

} // namespace hsring::model
