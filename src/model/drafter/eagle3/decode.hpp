#pragma once
// The EAGLE-3 drafter at decode time: chain drafting, as SGLang and vLLM run it with top-k 1. Per
// sequence (a row) the keys/values of every position the target verified are cached; a step drafts
// K tokens one after another, each the drafter's own token after the previous one, the chain's own
// keys seen only by the chain: the attention of the training-time test (eagle3/drafter.hpp), so
// decoding computes what training trained.
//
//   cached row j (j = 0 .. length(r) - 1):  fc(the 3 fused layers at position j) with the embedding
//                                           of token j + 1, RoPE at j + 1 (training's row j, step 0)
//   draft 1:      the last cached row's output (layer output before the final norm) -> logits
//   draft s + 1:  embed(draft s) with draft s's output as the hidden state, RoPE at length(r) + s,
//                 attending the cached rows and the chain's keys of drafts 1..s (training's step s)
//
// The chain's keys are never cached: after a verify step the cache grows by the verified positions
// only (t, the accepted drafts, each with the token after it), which is the drafter's KV cache
// cropped to the accepted length. Only the last verified position's output is computed (draft 1
// reads it): the layer's keys/values are projections of its input, not of other rows.
//
// Drafts are over the draft vocabulary, mapped to the target's ids by d2t (the other ids' logits
// are -inf). Weights are cast to the compute dtype once. With `graphs`, one sequence's chain steps
// run in fixed shapes (the cached positions in a window of the length rounded up to 256, those past
// the length masked) as CUDA graphs on a GPU (ops/step_graphs.hpp): greedy, the whole chain is one
// graph per window (argmax on the device); sampled, one graph per step and window.
#include "model/drafter/eagle3/drafter.hpp"
#include "model/drafter/interface/decode_drafter.hpp"
#include "model/ops/step_graphs.hpp"
#include "model/target/target.hpp"

#include <cstdint>
#include <vector>

namespace hsring::model {

class Eagle3DecodeDrafter final : public DecodeDrafter {
public:
    // Room for `rows` sequences of `capacity` verified positions each; `draft_tokens` (>= 1) drafts
    // per step (a verify step is one more token).
    Eagle3DecodeDrafter(Eagle3Drafter& drafter, const TargetHead& head, std::int64_t rows, std::int64_t capacity,
                        at::Device device, at::ScalarType dtype, std::int64_t draft_tokens, bool graphs = false);
    const std::vector<int>& target_layer_ids() const override { return ids_; }
    std::int64_t max_block() const override { return draft_tokens_ + 1; }
    void reset(std::int64_t rows) override;
    void extend(const at::Tensor& captured, const std::vector<std::int64_t>& counts,
                const std::vector<std::int64_t>& next_tokens) override;
    void keep_rows(const std::vector<std::int64_t>& rows) override;
    std::vector<std::int64_t> draft(const std::vector<std::int64_t>& lasts, const std::vector<std::int64_t>& ks,
                                    const PickDrafts& pick) override;
    bool graphs_captured() const override { return graphs_.capturing() && graphs_.size() > 0; }
    std::int64_t length(std::int64_t row) const { return lengths_.at(static_cast<std::size_t>(row)); }
    // Whether one row's steps run in fixed shapes (made with `graphs`; captured on a GPU).
    bool fixed_shapes() const { return fixed_; }

private:
    struct Qkv {
        at::Tensor q, k, v;  // [n, heads, head_dim], RoPE applied to q and k
    };
    // The layer's projections of n rows: embeddings emb [n, H], hidden states [n, H], positions [n].
    Qkv project(const at::Tensor& emb, const at::Tensor& hidden, const at::Tensor& positions) const;
    // The layer's output [n, H] for the hidden states `hidden` [n, H] and their attention o [n, hq, d].
    at::Tensor finish(const at::Tensor& hidden, const at::Tensor& o) const;
    // Attention of q [n, hq, d] over the first `window` cached positions of the rows `rows` (one
    // per query; positions past len[i] (int64 [n] on the device) masked) and the chain's keys/values
    // (each [n, hkv, d]).
    at::Tensor attend(const at::Tensor& q, const at::Tensor& rows, std::int64_t window, const at::Tensor& len,
                      const std::vector<at::Tensor>& chain_k, const std::vector<at::Tensor>& chain_v) const;
    // extend's device work: the cached keys/values of rows `rows` at `slots` from the captured
    // layers [3, n, H] with the next tokens `next` at RoPE positions `rope_pos`; the outputs of
    // positions `last_index` into last_out_ of rows `extended` (their new `lengths`, attending
    // `window` cached positions). What a CUDA graph of a one-row extend captures.
    void write_rows(const at::Tensor& captured, const at::Tensor& next, const at::Tensor& rope_pos, const at::Tensor& rows,
                    const at::Tensor& slots, const at::Tensor& last_index, const at::Tensor& extended,
                    std::int64_t window, const at::Tensor& lengths);
    // Logits [R, target vocab] (fp32; -inf outside the draft vocabulary) of the outputs h [R, H].
    at::Tensor draft_logits(const at::Tensor& h) const;
    // draft() of one row through the fixed-shape steps (graphs): the whole chain as one graph when
    // the pick is greedy, else one graph per step.
    std::vector<std::int64_t> draft_fixed(std::int64_t steps, const PickDrafts& pick);
    // The fixed-shape chain's step 0 (the last cached position's output into chain_h_[0]) and step
    // s >= 1 (draft `token` [1] at RoPE position len + s; len [1] on the device); their logits [1, vocab].
    at::Tensor chain_first();
    at::Tensor chain_step(std::int64_t s, const at::Tensor& token, const at::Tensor& len, std::int64_t window);

    Eagle3Config config_;
    std::vector<int> ids_;
    std::int64_t draft_tokens_;
    std::int64_t capacity_;
    at::Device device_;
    at::ScalarType dtype_;
    at::Tensor embed_, inv_freq_, fc_, input_norm_, hidden_norm_, post_norm_, q_, k_, v_, o_, gate_, up_, down_, norm_,
        lm_head_, draft_ids_;
    at::Tensor keys_, values_;  // [rows, capacity, kv heads, head_dim]
    at::Tensor last_out_;       // [rows, H]: each row's last cached position's output (draft 1 reads it)
    std::vector<std::int64_t> lengths_;
    bool fixed_;
    StepGraphs graphs_;                  // key: (chain step or -1 for extend, [count,] window, last_out_'s storage)
    at::Tensor chain_h_;                 // [draft tokens, 1, H]: step s's output (fixed shapes)
    at::Tensor chain_k_, chain_v_;       // [draft tokens, 1, kv heads, head_dim]: the chain's keys/values
};

} // namespace hsring::model
