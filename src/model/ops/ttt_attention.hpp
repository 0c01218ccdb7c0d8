#pragma once
// The attention of one EAGLE-3 training-time-test step (src/model/drafter/eagle3/drafter.hpp):
// step k's queries q [R, hq, d] see step 0's keys of their own sequence causally (rows packed by
// sequence, `seqs` over rows) and, of every later step s = 1..k, only their own row's key.
//
//   scores   = [ q_r . k0_c (c <= r, same sequence) | q_r . ks_r (s = 1..k) ] * scale
//   out_r    = softmax(scores) @ [ v0_c | vs_r ]
//
// CUDA bf16/fp16: flash varlen over step 0's keys (no [hq, R, R] score matrix; its log-sum-exp
// per row and head), merged with the k diagonal keys by log-sum-exp; the backward is flash's
// backward run with the merged output and log-sum-exp (softmax over the union of keys: the
// probabilities of step 0's keys are exp(s - lse_merged), D = rowsum(dO . O_merged)) plus the
// diagonal keys' own gradients. Elsewhere: the eager composition (fp32 softmax, as transformers'
// eager attention and SpecForge's EAGLE-3 trainer), the reference the GPU test compares against.
#include "model/ops/attention.hpp"

#include <ATen/core/Tensor.h>

#include <vector>

namespace hsring::model {

// keys/values: step 0..k, each [R, hkv, d] (hq a multiple of hkv). `causal` [R, R] bool (row r may
// see step 0's row c) is the eager path's mask; undefined: built from `seqs`. Returns [R, hq, d].
at::Tensor ttt_attention(const at::Tensor& q, const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& values,
                         const PackedSequences& seqs, const at::Tensor& causal, double scale);

// The same by the eager composition on any device (the GPU test's reference).
at::Tensor ttt_attention_eager(const at::Tensor& q, const std::vector<at::Tensor>& keys,
                               const std::vector<at::Tensor>& values, const at::Tensor& causal, double scale);

// Whether ttt_attention takes the flash path for q and these sequences.
bool ttt_attention_flash(const at::Tensor& q, const PackedSequences& seqs);

// [R, R] bool: row r may see row c (same sequence, c <= r).
at::Tensor packed_causal_mask(const PackedSequences& seqs, at::Device device);

} // namespace hsring::model
