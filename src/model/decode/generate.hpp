#pragma once
// Batched generation with the frozen target (no autograd): prefill + KV-cached decode,
// greedy or temperature/top-p sampling, stop tokens and max_new_tokens per request.
//
// Scheduling: up to `batch` requests are in flight, each in its own KVCache row. A request that
// finishes (a stop token, max_new_tokens, or the model's max positions) leaves the batch at once
// (its row is dropped) and the next waiting one is prefilled into it (continuous batching).
//
// Determinism: a request's tokens are a function of (its prompt, its seed, the options): it
// samples with its own SequenceRng (sampling.hpp), one uniform per new token, so it draws the
// same tokens alone or in any batch, in any order of requests.
#include "model/decode/sampling.hpp"
#include "model/target/target.hpp"

#include <cstdint>
#include <vector>

namespace hsring::model {

struct GenerateOptions {
    std::int64_t max_new_tokens = 128;
    SamplingParams sampling;                // temperature 0 = greedy
    std::vector<std::int64_t> stop_tokens;  // generation ends after one of these (kept in the output)
    std::int64_t batch = 16;                // requests in flight at once
    // At batch 1, decode steps through the decode engine's fixed shapes (decode_graphs.hpp: CUDA
    // graphs on a GPU); false, or a larger batch: forward_cached, launched op by op.
    bool decode_graphs = true;
};

struct GenerateRequest {
    std::vector<std::int64_t> prompt;  // at least one token, shorter than max positions
    std::uint64_t seed = 0;            // this request's sampling stream
};

enum class FinishReason { Stop, Length };  // Length: max_new_tokens or the model's max positions
const char* to_string(FinishReason r);

struct GenerateOutput {
    std::vector<std::int64_t> tokens;  // the new tokens only; a stop token that ended it included
    FinishReason finish = FinishReason::Length;
};

struct GenerateStats {
    std::int64_t prompt_tokens = 0, new_tokens = 0;
    std::int64_t prefills = 0, decode_steps = 0;  // forward calls of each kind
    double prefill_seconds = 0, decode_seconds = 0;
    double seconds() const { return prefill_seconds + decode_seconds; }
};

struct GenerateResult {
    std::vector<GenerateOutput> outputs;  // one per request, in request order
    GenerateStats stats;
};

// Runs every request to completion. Throws hsring::Error for an empty prompt, a prompt that
// leaves no room under the model's max_position_embeddings, a token id outside the vocabulary
// or bad options (each message names the request).
GenerateResult generate(TargetModel& model, const std::vector<GenerateRequest>& requests,
                        const GenerateOptions& options);

} // namespace hsring::model
