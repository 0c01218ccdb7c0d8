#pragma once
// The EAGLE-3 drafter at decode time (chain drafting, as SGLang and vLLM run it with top-k 1): per
// sequence, the keys/values of the rows (fused target layers at j, token j+1) of every token the
// target ran, cached; a step drafts K tokens one after another, each the drafter's argmax (or
// sample) of the previous step's output, the chain's own keys seen only by the chain (training-time
// test's attention, eagle3/drafter.hpp).
//
//   row r, cached:  rows 0 .. length(r) - 1   (position j + 1: token j + 1 with the layers at j)
//   draft s = 0:    the last cached row's output -> logits -> draft 1 (position length(r) + 1)
//   draft s >= 1:   embed(draft s) with the previous output at position length(r) + s, attending the
//                   cached rows and the chain's keys of steps 1..s -> draft s + 1
// Drafts are over the draft vocabulary, mapped to the target's ids by d2t.
#include "model/drafter/eagle3/drafter.hpp"
#include "model/drafter/interface/decode_drafter.hpp"
#include "model/target/target.hpp"

#include <cstdint>
#include <vector>

namespace hsring::model {

class Eagle3DecodeState final : public DecodeDrafter {
public:
    // draft_tokens: drafts per step (the verify block is one more).
    Eagle3DecodeState(Eagle3Drafter& drafter, const TargetHead& head, std::int64_t rows, std::int64_t capacity,
                      at::Device device, at::ScalarType dtype, std::int64_t draft_tokens);
    const std::vector<int>& target_layer_ids() const override { return ids_; }
    std::int64_t max_block() const override { return draft_tokens_ + 1; }
    void reset(std::int64_t rows) override;
    void extend(const at::Tensor& captured, const std::vector<std::int64_t>& counts,
                const std::vector<std::int64_t>& next_tokens) override;
    void keep_rows(const std::vector<std::int64_t>& rows) override;
    std::vector<std::int64_t> draft(const std::vector<std::int64_t>& lasts, const std::vector<std::int64_t>& ks,
                                    const PickDrafts& pick) override;

private:
    // One step of the layer for rows x [n, 2H] at positions [n]: q, k, v.
    struct Qkv {
        at::Tensor q, k, v;
    };
    Qkv project(const at::Tensor& emb, const at::Tensor& hidden, const at::Tensor& positions) const;
    // The layer's output for `hidden` [n, H] given its attention output o [n, hq, d].
    at::Tensor finish(const at::Tensor& hidden, const at::Tensor& o) const;
    // Attention of q [rows, hq, d] over each row's cached keys (padded to the longest, masked) and
    // its chain keys [rows, s, hkv, d].
    at::Tensor attend(const at::Tensor& q, const std::vector<at::Tensor>& chain_k,
                      const std::vector<at::Tensor>& chain_v) const;

    Eagle3Config config_;
    std::vector<int> ids_;
    std::int64_t draft_tokens_;
    at::Tensor embed_, inv_freq_, fc_, input_norm_, hidden_norm_, post_norm_, q_, k_, v_, o_, gate_, up_, down_, norm_,
        lm_head_, draft_ids_;
    at::Tensor keys_, values_;  // [rows, capacity, kv heads, head_dim]
    at::Tensor last_out_;       // [rows, H]: each row's last cached row's output (draft 1 comes from it)
    std::int64_t capacity_;
    std::vector<std::int64_t> lengths_;
    at::Device device_;
    at::ScalarType dtype_;
};

} // namespace hsring::model
