#pragma once
// gpt-oss's attention over packed sequences: causal, optionally within a sliding window (key j is
// visible to query i iff j <= i and j > i - window, transformers' sliding_window_overlay), with
// per-head attention sinks: one learned logit per query head joins every query's softmax and takes
// probability mass without contributing a value (transformers' gpt-oss eager_attention_forward).
//
// This is the exact reference path in ATen ops, one sequence at a time (CPU, and any device). The
// GPU path it is meant to check: flash varlen with its window and log-sum-exp, the sink applied
// after as out * sigmoid(lse - sink) (softmax over [scores, sink] = softmax(scores) * Z/(Z + e^sink)).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace hsring::model {

// q [T, Hq, D], k and v [T, Hkv, D] (Hq a multiple of Hkv), sinks [Hq], cu_seqlens: S+1 host
// offsets; window 0 = full causal attention. Returns [T, Hq, D] in q's dtype.
at::Tensor sink_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                          const std::vector<std::int64_t>& cu_seqlens, std::int64_t window, double scale);

} // namespace hsring::model
