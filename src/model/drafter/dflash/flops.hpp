#pragma once
// The matmul work of one DFlash training step (forward + backward), in FLOPs (a multiply-add is
// 2), counted from the shapes the step computes. Elementwise work (norms, RoPE, softmax, SiLU,
// the cross-entropy's exp) is not counted; neither is recomputation ([train] recompute = "layers"
// runs the layers' forward twice, the count stays the model's work).
//
// With T context tokens, R = blocks x B block rows, S scored rows (weight > 0), H hidden, I
// intermediate, Hq / Hkv heads of D dims, V vocab, L captured layers, N drafter layers:
//   layers      N x 3 x 2R(H*Hq*D + 2*H*Hkv*D + Hq*D*H + 3*H*I)   q, k, v, o, gate, up, down on the
//               block rows; backward = 2 x forward (input and weight gradients)
//   context_kv  N x 3 x 2T(2*H*Hkv*D)          k/v projections of the fused context rows (the
//               context gets a gradient: fc and hidden_norm are trained)
//   attention   N x 3 x sum over blocks 2 x 2(Hq*B)(keys_b)D   QK^T and PV over the keys each
//               block's rows see: keys_b = its context before the anchor + its own B rows;
//               backward = 2 x forward
//   attention_padded   N x 3 x sum over groups 2 x 2(Hq*rows_g)(key_len_g)D - attention: what
//               the kernels compute beyond that (attention.hpp's groups: each row against the
//               group's whole context prefix and blocks, keys padded to a multiple of 256). Work
//               done, not useful work: not in total() (it was until 2026-12, ~12-14% of the
//               reported TFLOP/s with 256-block groups at the recipe shape)
//   fc          2 x 2T(L*H)H                   forward + weight gradient (the captured hidden
//               states need no gradient)
//   lm_head     2 x 2S*H*V                     logits + d(hidden) of the scored rows only (the
//               head is frozen: no weight gradient)
#include "model/ops/attention.hpp"
#include "model/drafter/dflash/blocks.hpp"
#include "model/drafter/dflash/config.hpp"

#include <cstdint>
#include <vector>

namespace hsring::model {

struct DFlashStepFlops {
    double layers = 0, context_kv = 0, attention = 0, fc = 0, lm_head = 0;
    double attention_padded = 0;  // computed over keys no row sees (see above); not in total()
    // The useful work (what TFLOP/s is counted from).
    double total() const { return layers + context_kv + attention + fc + lm_head; }
    // What the kernels compute: the useful work and the padded attention.
    double computed() const { return total() + attention_padded; }
};

// anchors / seq_begin as in DFlashBlocks; layout = DFlashLossOptions::attention.
DFlashStepFlops dflash_step_flops(const DFlashConfig& c, std::int64_t context_tokens,
                                  const std::vector<std::int64_t>& anchors, const std::vector<std::int64_t>& seq_begin,
                                  std::int64_t scored_rows, const BlockAttentionLayout& layout);

// The same for sampled blocks (reads the number of weighted rows: a device sync on GPU).
DFlashStepFlops dflash_step_flops(const DFlashConfig& c, std::int64_t context_tokens, const DFlashBlocks& blocks,
                                  const BlockAttentionLayout& layout);

// A GEMM [m x k] x [k x n]: 2mkn.
inline double gemm_flops(std::int64_t m, std::int64_t k, std::int64_t n) {
    return 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
}

} // namespace hsring::model
