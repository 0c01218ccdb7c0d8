#pragma once
// What the speculative-decoding tests of every drafter type share (test_spec_decode,
// test_eagle3_decode): their prompts, spec_decode options that must reproduce generate's, the
// tiny target that runs out of positions and the tied one that echoes its last token.
#include "decode_fixture.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <vector>

namespace hsring::test {

using namespace hsring::model;

// Three prompts of 5, 17 and 1 tokens, each with its sampling seed (0 for greedy runs).
inline std::vector<GenerateRequest> spec_prompts(const std::array<std::uint64_t, 3>& seeds = {0, 0, 0}) {
    return {{iota_tokens(5, 1), seeds[0]}, {iota_tokens(17, 200, 3), seeds[1]}, {{7}, seeds[2]}};
}

// generate's options: `max_new_tokens`, greedy unless `sampling` says otherwise.
inline GenerateOptions generate_options(std::int64_t max_new_tokens, SamplingParams sampling = {}) {
    GenerateOptions o;
    o.max_new_tokens = max_new_tokens;
    o.sampling = sampling;
    return o;
}

// spec_decode's options that must emit generate's tokens under `go` (its max_new_tokens, sampling
// and stop tokens), with `draft_tokens` per step (0: the drafter type's default) and `batch` rows.
inline SpecDecodeOptions spec_options_like(const GenerateOptions& go, std::int64_t draft_tokens = 0,
                                           std::int64_t batch = 1) {
    SpecDecodeOptions o;
    o.max_new_tokens = go.max_new_tokens;
    o.sampling = go.sampling;
    o.stop_tokens = go.stop_tokens;
    o.draft_tokens = draft_tokens;
    o.batch = batch;
    return o;
}

// preset:tiny (seed 12) with 24 positions: the 17-token prompt runs out of them.
inline TargetModel short_tiny_target() {
    ModelShape s = preset_shape("tiny");
    s.max_position_embeddings = 24;
    return TargetModel::load(s, at::kCPU, at::kFloat, 12);
}

// A tiny random target with tied embeddings (seed 4): greedy, it echoes its prompt's last token.
inline TargetModel echoing_tiny_target() {
    ModelShape s = preset_shape("tiny");
    s.tie_word_embeddings = true;
    return TargetModel::from_weights(s, random_target_weights(s, 4, at::kCPU, at::kFloat), at::kCPU, at::kFloat, "test");
}

// Greedy generate of `max_new_tokens` for `reqs`; requires every output to be its prompt's last
// token repeated (what the drafters that draft the target's token are checked against).
inline GenerateResult require_echoes(TargetModel& m, const std::vector<GenerateRequest>& reqs,
                                     std::int64_t max_new_tokens) {
    GenerateResult plain = generate(m, reqs, generate_options(max_new_tokens));
    for (std::size_t i = 0; i < reqs.size(); ++i)
        REQUIRE_MESSAGE(plain.outputs[i].tokens ==
                            std::vector<std::int64_t>(static_cast<std::size_t>(max_new_tokens), reqs[i].prompt.back()),
                        "the tied target does not echo prompt " << i);
    return plain;
}

} // namespace hsring::test
