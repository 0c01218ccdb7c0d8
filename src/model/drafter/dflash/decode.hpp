#pragma once
// The DFlash drafter at decode time (speculative decoding): the keys and values of each sequence's
// context are cached per layer, so a step projects only the context rows accepted since the
// previous step, not the whole context again. Several sequences decode at once as rows, each with
// its own length (tau during training decodes all its prompts in one batch).
//
// Why this is exact: in every drafter layer the context rows' keys/values are k/v_proj of the fused
// context (hidden_norm(fc(captured layers))) with k_norm and RoPE at the row's position — a function
// of that row alone, never of the block. So the cache holds exactly the rows draft_hidden
// (spec_decode.hpp) recomputes; the block's own rows are computed fresh each step (z-lab's loop
// caches them and crops them off again: the same thing).
//
//   row r, context:  [ 0 .. length(r) )                accepted tokens' captured layers
//          block:    [ length(r) .. length(r)+b_r )    [last_r, MASK x (b_r-1)], queries; attends
//                                                      its row's context and its own block,
//                                                      non-causally
//
// A draft writes its block's keys/values into the cache right after the context (a row holds
// capacity + block size positions), where the next extend overwrites them: positions past a
// row's length are scratch. Each block query attends the keys at or before its row's last block
// position, so padding of a shorter block (at later positions) is never seen, and the step is the
// decode engine's fixed-shape step (decode_step_ops.hpp: the GEMV for 1-16 rows, add + norm, q/k
// norm + rotation + cache write, attention over the cache), a few kernels per layer.
//
// The weights are cast to the compute dtype once (the drafter keeps fp32 masters): a decode step
// must not convert a billion parameters.
#include "model/drafter/dflash/drafter.hpp"
#include "model/drafter/interface/decode_drafter.hpp"
#include "model/ops/step_graphs.hpp"
#include "model/target/target.hpp"

#include <ATen/core/Tensor.h>

#include <cstdint>
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
    // draft() of one sequence in fixed shapes (what a CUDA graph captures): longs [3b] int64 on the
    // device holds the block's tokens, their positions, and b copies of the last position (what
    // each query attends up to); the keys are the first `window` positions of the cache
    // (length + b <= window <= key_capacity()), those past the block unseen. [1, b, H].
    at::Tensor draft_fixed(const at::Tensor& longs, std::int64_t b, std::int64_t window) const;
    // Context rows a sequence holds.
    std::int64_t capacity() const { return capacity_; }
    // Positions a cache row holds: the context and one block of scratch.
    std::int64_t key_capacity() const { return capacity_ + config_.block_size; }
    std::int64_t mask_token_id() const { return config_.mask_token_id; }
    // The cache's storage (moves on keep_rows and on a reset to another number of rows).
    const void* storage() const { return keys_.empty() ? nullptr : keys_[0].data_ptr(); }

private:
    // extend's device work: each layer's keys/values of the captured rows [L, n, H] at RoPE
    // `positions`, written to the cache's (row * key_capacity + position) `slots`.
    void write_context(const at::Tensor& captured, const at::Tensor& positions, const at::Tensor& slots);
    // The blocks' forward: ids [3, rows * b] (tokens, positions, the position each query attends up
    // to), row-major; writes the block's keys/values at its positions (scratch past the length) and
    // attends each row's first `window` cache positions. [rows * b, H] after the final norm.
    at::Tensor block_forward(const at::Tensor& ids, std::int64_t b, std::int64_t window) const;
    struct Layer {
        // qkv: q | k | v stacked [(heads + 2 kv heads) * head_dim, H]; gate_up: gate | up.
        at::Tensor input_norm, qkv, o, q_norm, k_norm, post_norm, gate_up, down;
    };
    DFlashConfig config_;
    at::Tensor embed_;           // the target's embedding (shared, frozen)
    at::Tensor inv_freq_;
    at::Tensor fc_;              // [H, L * H]
    at::Tensor hidden_norm_, norm_;
    std::vector<Layer> layers_;
    std::vector<at::Tensor> keys_, values_;  // per layer [rows, key_capacity, kv heads, head_dim]
    std::int64_t capacity_ = 0;
    std::vector<std::int64_t> lengths_;
    at::Device device_;
    at::ScalarType dtype_;
};

// DFlash behind the decode seam (drafter/interface/decode_drafter.hpp): one block per step, its
// drafts the target's LM head over the block's slots 1.. (picked together).
// With `graphs`, one sequence's draft steps run in fixed shapes (draft_fixed + the LM head, its
// window the length + block rounded up to 256 rows), captured as CUDA graphs on a GPU
// (ops/step_graphs.hpp).
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
