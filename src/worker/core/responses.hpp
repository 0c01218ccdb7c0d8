#pragma once
// Answers written by the target ([data] responses = "target"): a packed batch of response
// templates (hsring/dataset.hpp) becomes prompt + generated answer per turn, before its hidden
// states are captured, in the same target worker.
//
//   template  | system user | room of max_new_tokens | user | room ... |
//   answered  | system user | answer 1 (<= room)     | user | answer 2 |   loss mask over the answers
//
// Turn k of every sample is generated from everything before it (its context and its own earlier
// answers), all samples of the batch at once. Sample i's turn k draws from the stream
// answer_seed(seed, key_i, k), key_i = (data-set sample, epoch) (held-out: (sample, eval)), so
// a plan slot produced again after a death gets the same answers (at temperature 0 every stream
// is the argmax), and what is trained stays a function of config, data and seed (docs/architecture.md
// invariant 10). No torch here: the generator is handed in (TorchTarget: model::generate).
#include "worker/core/packer.hpp"

#include <cstdint>
#include <functional>
#include <vector>

namespace hsring::worker {

struct AnswerRequest {
    std::vector<std::int64_t> prompt;  // everything before this answer
    std::uint64_t seed = 0;            // its sampling stream
    std::uint32_t room = 0;            // at most this many tokens are kept
};

// Generates one answer per request (new tokens only; a stop token that ended one included),
// in request order.
using AnswerGenerator = std::function<std::vector<std::vector<std::int64_t>>(const std::vector<AnswerRequest>&)>;

// The stream of one answer: a pure function of the [generate] seed, the sample's key and the turn.
std::uint64_t answer_seed(std::uint64_t seed, std::uint64_t key, std::uint32_t turn);

// Fills every answer room of the batch (loss mask 1 runs) with generated tokens, cut to its room;
// tokens, loss mask and lengths are rewritten. `keys` has one entry per sample (PackedBatch::keys).
// Returns the number of generated tokens kept.
std::uint64_t answer_templates(PackedBatch& batch, std::uint64_t seed, const AnswerGenerator& generate);

} // namespace hsring::worker
