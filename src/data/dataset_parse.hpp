#pragma once
// One JSONL line -> one sample, appended to the data set's flat arrays. A hand-written JSON
// scanner: it validates the whole line (so "not JSON" is caught wherever it is) but builds no
// DOM, and reads the two integer arrays straight into the token and mask vectors. This is
// what makes a 100 MB file load in well under a second instead of many.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hsring::data::detail {

// Why a line is not a sample, with the fix; the caller prefixes "FILE:LINE: ".
struct BadLine {
    std::string reason;
};

// Appends the line's input_ids to `tokens` and its loss_mask to `mask` (all ones when the key
// is absent); both grow by the same count. Tokens must be in [0, vocab_size) (vocab_size 0:
// [0, INT32_MAX]). Returns whether the line had a loss_mask. Throws BadLine; the vectors may then
// hold a partial sample, which the caller trims back.
bool parse_sample_line(std::string_view line, std::int64_t vocab_size,
                       std::vector<std::int32_t>& tokens, std::vector<std::uint8_t>& mask);

} // namespace hsring::data::detail
