#pragma once
// EAGLE-3's draft vocabulary: the `draft_vocab` target tokens seen most often in the training data
// (ties: the smaller id; too few seen: the smallest unseen ids fill up), sorted by id — the rule of
// vllm-project/speculators' build_vocab_mappings_from_distribution, so the same counts give the
// same mapping.
//   d2t [draft_vocab] int64: target id = draft id + d2t[draft id]
//   t2d [vocab] bool: the target ids the drafter can propose
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace hsring::model {

std::pair<at::Tensor, at::Tensor> eagle3_vocab_map(const std::vector<std::int64_t>& counts, std::int64_t draft_vocab);

} // namespace hsring::model
