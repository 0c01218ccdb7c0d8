#pragma once
// The drafter's block attention in groups, shared by the drafter (src/model/ops/attention.hpp) and the
// planner (src/plan/workload.cpp), which must count the same shapes.
//
// How many keys one drafter attention call computes for a group whose context prefix and block
// rows together hold `keys` keys: rounded up to a multiple of min_pad, and of one eighth of the
// power of two at or below `keys` when that is larger. Every new key length is a new kernel shape
// (cuDNN builds a plan per shape), so the count of distinct lengths must stay small however long
// the samples are: at most ~8 per doubling of the length, for at most 1/8 of padding. Shared by
// the drafter (src/model/ops/attention.cpp) and the planner (src/plan/workload.cpp).
#include <bit>
#include <cstdint>

namespace hsring {

// The drafter's attention layout by default (model::BlockAttentionLayout; the planner assumes it):
// 32 consecutive blocks of one sequence per call, keys padded to at least 256. 32 x 256 was the
// fastest on the H200 at the recipe shape (bench/gpu/attention_sweep.sh, BENCHMARKS.md): 256-block
// groups compute 2.8x the attention, 16-block groups are host-bound.
inline constexpr std::int64_t kAttentionGroupBlocks = 32;
inline constexpr std::int64_t kAttentionKeyPad = 256;

inline std::int64_t padded_key_len(std::int64_t keys, std::int64_t min_pad) {
    if (keys <= 0) return 0;
    const auto octave = static_cast<std::int64_t>(std::bit_floor(static_cast<std::uint64_t>(keys)));
    const std::int64_t pad = octave / 8 > min_pad ? octave / 8 : min_pad;
    return (keys + pad - 1) / pad * pad;
}

} // namespace hsring
