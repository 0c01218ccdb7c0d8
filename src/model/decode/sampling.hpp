#pragma once
// Choosing the next token from logits: greedy (temperature 0) or temperature + top-p sampling
// with one uniform number per row from that row's own generator.
//
// A row's token depends only on its logits and its own uniform, never on the other rows: a
// sequence samples the same tokens alone or in any batch (up to the float noise of its logits).
// The uniforms come from a host splitmix64 stream per sequence (SequenceRng), so the same seed
// draws the same numbers on the CPU and on a GPU, and no device generator is shared by rows.
#include "data/splitmix.hpp"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace hsring::model {

struct SamplingParams {
    double temperature = 0.0;  // 0 = greedy (argmax); > 0 divides the logits
    double top_p = 1.0;        // (0, 1]: sample among the most likely tokens holding this mass
};

// One sequence's random stream: uniforms in [0, 1) from splitmix64 seeded by `seed`.
class SequenceRng {
public:
    explicit SequenceRng(std::uint64_t seed) : rng_(data::detail::mix64(seed)) {}
    double uniform() { return to_unit(rng_.next()); }
    // The i-th (0-based) uniform() of SequenceRng(seed), without drawing the ones before it:
    // speculative decoding samples token i of a sequence with the very number plain generation
    // uses for it, whatever the drafts were, so both emit the same tokens for the same seed.
    static double uniform_at(std::uint64_t seed, std::uint64_t i) {
        return to_unit(data::detail::mix64(data::detail::mix64(seed) + (i + 1) * data::detail::kGolden));
    }

private:
    static double to_unit(std::uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }
    data::detail::SplitMix64 rng_;
};

// Throws hsring::Error for a negative temperature or top_p outside (0, 1].
void check_sampling(const SamplingParams& p);

// Next token of every row of logits [rows, vocab] (any floating dtype, any device) as [rows]
// int64 on the logits' device. Greedy: argmax (the first of equal maxima, as torch.argmax).
// Sampling: probabilities softmax(logits / temperature) in fp32, the top-p set as transformers'
// TopPLogitsWarper keeps it (the most likely tokens until their mass reaches top_p, at least
// one), renormalised; the token is where the set's cumulative mass first exceeds uniforms[r].
// `uniforms` (one per row, in [0, 1)) is unused when greedy.
at::Tensor sample_tokens(const at::Tensor& logits, const SamplingParams& params, const std::vector<double>& uniforms);

} // namespace hsring::model
