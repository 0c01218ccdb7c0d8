#pragma once
// How many keys one drafter attention call computes for a group whose context prefix and block
// rows together hold `keys` keys: rounded up to a multiple of min_pad, and of one eighth of the
// power of two at or below `keys` when that is larger. Every new key length is a new kernel shape
// (cuDNN builds a plan per shape), so the count of distinct lengths must stay small however long
// the samples are: at most ~8 per doubling of the length, for at most 1/8 of padding. Shared by
// the drafter (src/model/attention.cpp) and the planner (src/plan/workload.cpp).
#include <bit>
#include <cstdint>

namespace hsring {

inline std::int64_t padded_key_len(std::int64_t keys, std::int64_t min_pad) {
    if (keys <= 0) return 0;
    const auto octave = static_cast<std::int64_t>(std::bit_floor(static_cast<std::uint64_t>(keys)));
    const std::int64_t pad = octave / 8 > min_pad ? octave / 8 : min_pad;
    return (keys + pad - 1) / pad * pad;
}

} // namespace hsring
