#pragma once
// The DFlash drafter at decode time (speculative decoding, one sequence): the keys and values of
// its context are cached per layer, so a step projects only the context rows accepted since the
// previous step, not the whole context again.
//
// Why this is exact: in every drafter layer the context rows' keys/values are k/v_proj of the fused
// context (hidden_norm(fc(captured layers))) with k_norm and RoPE at the row's position — a function
// of that row alone, never of the block. So the cache holds exactly the rows draft_hidden
// (spec_decode.hpp) recomputes; the block's own rows are computed fresh each step and never cached
// (z-lab's loop caches them and crops them off again: the same thing).
//
//   rows:  [ 0 .. length() )            context: the accepted tokens' captured layers
//   block: [ length() .. length()+b )   [last, MASK x (b-1)], queries; attends all context rows
//                                       and its own block, non-causally
//
// The weights are cast to the compute dtype once (the drafter keeps fp32 masters): a decode step
// must not convert a billion parameters.
#include "model/dflash_drafter.hpp"
#include "model/target.hpp"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace hsring::model {

class DFlashDecodeState {
public:
    // Room for `capacity` context rows on `device`, compute dtype `dtype`. The drafter must outlive
    // this state only for its configuration; the weights used are the ones at construction.
    DFlashDecodeState(DFlashDrafter& drafter, const TargetHead& head, std::int64_t capacity, at::Device device,
                      at::ScalarType dtype);

    // Appends context rows: captured [L, n, H] (any float dtype), the target layers of the tokens at
    // positions length() .. length()+n-1.
    void extend(const at::Tensor& captured);
    // Forgets the rows at positions >= length (crop only shortens).
    void crop(std::int64_t length);
    std::int64_t length() const { return length_; }

    // The drafter's output rows [b, H] (after the final norm) for the block [last, MASK x (b-1)] at
    // positions length() .. length()+b-1: what draft_hidden computes over the same context.
    // 2 <= b <= the drafter's block size.
    at::Tensor draft(std::int64_t last, std::int64_t b) const;

private:
    struct Layer {
        at::Tensor input_norm, q, k, v, o, q_norm, k_norm, post_norm, gate, up, down;
    };
    DFlashConfig config_;
    at::Tensor embed_;           // the target's embedding (shared, frozen)
    at::Tensor inv_freq_;
    std::vector<at::Tensor> fc_;  // fc's column block per captured layer, [H, H] each
    at::Tensor hidden_norm_, norm_;
    std::vector<Layer> layers_;
    std::vector<at::Tensor> keys_, values_;  // per layer [capacity, kv heads, head_dim]
    std::int64_t capacity_ = 0, length_ = 0;
    at::ScalarType dtype_;
};

} // namespace hsring::model
