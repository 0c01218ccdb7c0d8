#pragma once
// The DFlash drafter at decode time (speculative decoding): the keys and values of each sequence's
// context are cached per layer, so a step projects only the context rows accepted since the
// previous step, not the whole context again. Several sequences decode at once as rows, each with
// its own length (tau during training decodes all its prompts in one batch).
//
// Why this is exact: in every drafter layer the context rows' keys/values are k/v_proj of the fused
// context (hidden_norm(fc(captured layers))) with k_norm and RoPE at the row's position — a function
// of that row alone, never of the block. So the cache holds exactly the rows draft_hidden
// (spec_decode.hpp) recomputes; the block's own rows are computed fresh each step and never cached
// (z-lab's loop caches them and crops them off again: the same thing).
//
//   row r, context:  [ 0 .. length(r) )                accepted tokens' captured layers
//          block:    [ length(r) .. length(r)+b_r )    [last_r, MASK x (b_r-1)], queries; attends
//                                                      its row's context and its own block,
//                                                      non-causally
//
// In one draft the rows' contexts are padded to the longest and blocks to the largest b_r; a key
// mask hides the padding, so a row drafts what it drafts alone (up to float noise of the batched
// kernels). With one row, or rows of equal lengths and blocks, there is no mask.
//
// The weights are cast to the compute dtype once (the drafter keeps fp32 masters): a decode step
// must not convert a billion parameters.
#include "model/drafter/dflash/drafter.hpp"
#include "model/drafter/interface/decode_drafter.hpp"
#include "model/ops/step_graphs.hpp"
#include "model/target/target.hpp"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace hsring::model {

class DFlashDecodeState {
public:
    // Room for `rows` sequences of `capacity` context rows each on `device`, compute dtype `dtype`,
    // all empty. The drafter must outlive this state only for its configuration; the weights used
    // are the ones at construction.
    DFlashDecodeState(DFlashDrafter& drafter, const TargetHead& head, std::int64_t rows, std::int64_t capacity,
                      at::Device device, at::ScalarType dtype);

    // Empties the state and makes room for `rows` sequences (the weights stay cast).
    void reset(std::int64_t rows);
    // Appends context rows to every sequence: captured [L, T, H] (any float dtype) holds, packed
    // sequence after sequence, counts[r] tokens of sequence r at positions length(r) onwards.
    // With `graphs`, one sequence's extend by at most a block runs in fixed shapes through them.
    void extend(const at::Tensor& captured, const std::vector<std::int64_t>& counts, StepGraphs* graphs = nullptr);
    // Forgets sequence r's rows at positions >= length (crop only shortens).
    void crop(std::int64_t row, std::int64_t length);
    // Keeps only the given sequences, in that order (drops finished ones).
    void keep_rows(const std::vector<std::int64_t>& rows);
    std::int64_t rows() const { return static_cast<std::int64_t>(lengths_.size()); }
    std::int64_t length(std::int64_t row) const;

    // The drafter's output [rows, max b, H] (after the final norm): row r's first blocks[r] slots
    // are its block [lasts[r], MASK x (blocks[r]-1)] at positions length(r).. (what draft_hidden
    // computes over the same context), the rest is padding. 2 <= blocks[r] <= the block size.
    at::Tensor draft(const std::vector<std::int64_t>& lasts, const std::vector<std::int64_t>& blocks) const;
    // draft() of one sequence in fixed shapes (what a CUDA graph captures): longs [2b + 1] int64 on
    // the device holds the block's tokens, their positions and the sequence's length; the block
    // attends the first `window` cached rows (length <= window <= capacity), those past the length
    // masked. [1, b, H].
    at::Tensor draft_fixed(const at::Tensor& longs, std::int64_t b, std::int64_t window) const;
    std::int64_t capacity() const { return capacity_; }
    std::int64_t mask_token_id() const { return config_.mask_token_id; }
    // The cache's storage (moves on keep_rows and on a reset to another number of rows).
    const void* storage() const { return keys_.empty() ? nullptr : keys_[0].data_ptr(); }

private:
    // extend's device work: each layer's keys/values of the captured rows [L, n, H] at RoPE
    // `positions`, written to the cache's (row * capacity + position) `slots`.
    void write_context(const at::Tensor& captured, const at::Tensor& positions, const at::Tensor& slots);
    // The blocks' forward: ids [2, rows * b] (tokens, positions), each row's first `window` cached
    // rows and its block as keys, `mask` [rows, 1, 1, window + b] (true = attended) or none.
    at::Tensor block_forward(const at::Tensor& ids, std::int64_t b, std::int64_t window,
                             const std::optional<at::Tensor>& mask) const;
    struct Layer {
        at::Tensor input_norm, q, k, v, o, q_norm, k_norm, post_norm, gate, up, down;
    };
    DFlashConfig config_;
    at::Tensor embed_;           // the target's embedding (shared, frozen)
    at::Tensor inv_freq_;
    std::vector<at::Tensor> fc_;  // fc's column block per captured layer, [H, H] each
    at::Tensor hidden_norm_, norm_;
    std::vector<Layer> layers_;
    std::vector<at::Tensor> keys_, values_;  // per layer [rows, capacity, kv heads, head_dim]
    std::int64_t capacity_ = 0;
    std::vector<std::int64_t> lengths_;
    at::Device device_;
    at::ScalarType dtype_;
};

// DFlash behind the decode seam (drafter/interface/decode_drafter.hpp): one block per step, its
// drafts the target's LM head over the block's slots 1.. (picked together).
// With `graphs`, one sequence's draft steps run in fixed shapes (draft_fixed + the LM head, its
// window the length rounded up to 256 rows), captured as CUDA graphs on a GPU (ops/step_graphs.hpp).
class DFlashDecodeDrafter final : public DecodeDrafter {
public:
    DFlashDecodeDrafter(DFlashDrafter& drafter, const TargetHead& head, std::int64_t rows, std::int64_t capacity,
                        at::Device device, at::ScalarType dtype, bool graphs = false);
    const std::vector<int>& target_layer_ids() const override { return ids_; }
    std::int64_t max_block() const override { return block_; }
    void reset(std::int64_t rows) override { state_.reset(rows); }
    void extend(const at::Tensor& captured, const std::vector<std::int64_t>& counts,
                const std::vector<std::int64_t>&) override {
        state_.extend(captured, counts, fixed_ ? &graphs_ : nullptr);
    }
    void keep_rows(const std::vector<std::int64_t>& rows) override { state_.keep_rows(rows); }
    std::vector<std::int64_t> draft(const std::vector<std::int64_t>& lasts, const std::vector<std::int64_t>& ks,
                                    const PickDrafts& pick) override;
    bool graphs_captured() const override { return graphs_.capturing() && graphs_.size() > 0; }

private:
    DFlashDecodeState state_;
    std::vector<int> ids_;
    std::int64_t block_;
    at::Tensor lm_head_;
    bool fixed_;
    StepGraphs graphs_;  // key: (block, window) for a draft, (-1, count) for an extend
};

} // namespace hsring::model
