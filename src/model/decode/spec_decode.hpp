#pragma once
// Speculative decoding with the frozen target and a drafter of any type (drafter/interface/
// decode_drafter.hpp): the loop of z-lab's `dflash_generate` (dflash/model.py), greedy or sampled,
// one prompt at a time (batch 1) or several as rows of one batch (SpecDecodeOptions::batch), each
// row following the loop below on its own. The drafter only proposes; the loop owns the target,
// its cache, verification and acceptance, so losslessness does not depend on the drafter. DFlash
// drafts a block per step (its B - 1 slots at once); EAGLE-3 a chain of draft_tokens tokens
// (drafter/eagle3/decode.hpp). B below is the verify step's length: 1 + the drafts per step.
//
//   prefill:  the target runs the prompt (KV cache), capturing the drafter's layers; its token
//             (argmax, or sampled) is the first new token.
//   step:     start = the cached length = the position of the last accepted token t (not yet run
//             through the target). The drafter drafts B-1 tokens (argmax, or sampled) for
//             positions start+1.. from the captured layers of the accepted tokens (DFlash: one
//             block [t, MASK x (B-1)] at positions start.., attending to the fused context and to
//             its own block non-causally, its drafts the target's LM head over slots 1..; EAGLE-3:
//             a chain, one token after another). The target verifies [t, drafts] in one cached
//             forward (logits of every token, captured layers) and picks its own token after each
//             prefix; the drafts equal to the target's token of the previous slot are accepted up
//             to the first mismatch (n of them), and the target's own token after them comes free:
//             n + 1 new tokens (the step's acceptance length). The cache is cropped to
//             start + n + 1 and the drafter's context grows by the verified tokens' captured layers
//             t, d_1..d_n (each with the token after it: EAGLE-3 reads the pair).
//
// Stopping follows z-lab's loop exactly: a step runs while the last accepted token's position is
// below prompt + max_new_tokens (so one more step runs when exactly max_new_tokens exist), every
// block has B slots, a stop token ends the loop after its step; the output is cut to
// max_new_tokens and after its first stop token, while every step's acceptance length counts in
// full. So tau is the number the reference loop reports for the same drafter and prompts.
//
// Lossless: every emitted token is the target's own after the tokens before it. Greedy: its argmax,
// so the output is plain greedy `generate`'s (up to float noise between a block forward and a
// one-token one). Sampled (temperature > 0): new token i is drawn with uniform number i of the
// request's seed (SequenceRng::uniform_at), the very number `generate` draws it with, so the output
// is `generate`'s for the same seed, and its distribution the target's whatever the drafter does;
// the drafts draw from a stream of their own (z-lab's rule: accept a draft iff it equals the
// target's sample).
#include "model/drafter/dflash/drafter.hpp"
#include "model/drafter/interface/trainable_drafter.hpp"
#include "model/decode/generate.hpp"
#include "model/decode/sampling.hpp"
#include "model/target/target.hpp"

#include <cstdint>
#include <vector>

namespace hsring::model {

struct SpecDecodeOptions {
    std::int64_t max_new_tokens = 128;
    SamplingParams sampling;  // temperature 0 = greedy; the seed is each request's
    std::vector<std::int64_t> stop_tokens;  // generation ends after one of these (kept in the output)
    // Prompts decoded at once: each step drafts their blocks in one drafter call and verifies them
    // in one target forward (tau during training); 1 = one prompt at a time (the batch-1 speedup).
    // Each prompt's tokens and acceptance lengths are the same at any batch (up to float noise
    // between batched and single kernels).
    std::int64_t batch = 1;
    // At one prompt at a time, verify steps through the decode engine's fixed shapes
    // (decode_graphs.hpp: CUDA graphs on a GPU) and draft steps through the drafter's (its
    // decoder's `graphs`); false, or several rows: forward_cached and the drafter op by op.
    bool decode_graphs = true;
    // Drafts per step: 0 = the drafter type's default (DFlash: its block - 1, always; EAGLE-3: 5).
    std::int64_t draft_tokens = 0;
};

struct SpecDecodeOutput {
    std::vector<std::int64_t> tokens;              // the new tokens only (the prefill's first included)
    // Per verify step: accepted drafts + 1 (z-lab's acceptance_lengths). The last step's tokens past
    // max_new_tokens or a stop token are not in `tokens`, so 1 + their sum >= tokens.size().
    std::vector<std::int64_t> acceptance_lengths;
    FinishReason finish = FinishReason::Length;
};

struct SpecDecodeStats {
    // verify_steps: one per prompt per step (a batched step that verifies r rows counts r).
    std::int64_t prompt_tokens = 0, new_tokens = 0, verify_steps = 0;
    std::int64_t accepted_tokens = 0;  // sum of the acceptance lengths
    double prefill_seconds = 0, draft_seconds = 0, verify_seconds = 0;
    double seconds() const { return prefill_seconds + draft_seconds + verify_seconds; }
    // Mean acceptance length over the verify steps (z-lab's tau); 0 without a step.
    double tau() const { return verify_steps > 0 ? double(accepted_tokens) / double(verify_steps) : 0.0; }
};

struct SpecDecodeResult {
    std::vector<SpecDecodeOutput> outputs;  // one per prompt, in order
    SpecDecodeStats stats;
    std::int64_t block = 0;  // tokens of a whole verify step: the last accepted one + the drafts per step
    bool draft_graphs = false;  // the draft steps ran as CUDA graphs (DecodeDrafter::graphs_captured)
};

// Throws hsring::Error when the drafter does not fit the target (hidden size, vocabulary, captured
// layer ids, mask token) or for a bad prompt (as generate: empty, too long, outside the vocabulary).
void check_spec_decode(const TargetModel& target, DFlashDrafter& drafter);

// The drafter's output rows [B, H] (compute dtype `dtype`) for the block [last, MASK x (B-1)] at
// positions start..start+B-1 of one sequence. context [L, >= start + 1, H]: row i < start holds the
// captured target layers of token i (rows >= start are not attended). What dflash_hidden computes
// for the same anchor of the whole sequence (dflash_blocks_at). `block` < B drafts a shorter block
// (fewer MASK tokens, which the block's rows attend: not a prefix of the full block's rows);
// 0 = the drafter's block size.
at::Tensor draft_hidden(DFlashDrafter& drafter, const TargetHead& head, const at::Tensor& context, std::int64_t last,
                        std::int64_t start, at::ScalarType dtype, std::int64_t block = 0);

// A drafter of any type (drafter/registry: load_drafter). Throws when it does not fit the target
// (TrainableDrafter::misfit) or cannot draft options.draft_tokens per step.
SpecDecodeResult spec_decode(TargetModel& target, TrainableDrafter& drafter, const std::vector<GenerateRequest>& prompts,
                             const SpecDecodeOptions& options);
// A DFlash drafter (check_spec_decode first).
SpecDecodeResult spec_decode(TargetModel& target, DFlashDrafter& drafter, const std::vector<GenerateRequest>& prompts,
                             const SpecDecodeOptions& options);

} // namespace hsring::model
