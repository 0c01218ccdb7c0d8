#pragma once
// The useful matmul FLOPs of one EAGLE-3 training step (eagle3_loss + backward), from the shapes
// eagle3/drafter.hpp computes: R rows (a sequence of n tokens gives n - 1), K training-time-test
// steps, each step running the whole midlayer over all R rows.
//
//   fc        2 R 3H H                      forward + its weight's gradient (x2: the fused layers
//                                           take no gradient)
//   layers    2 R (2H (hq + 2 hkv) d + hq d H + 3 H I) per step, x3 (forward, input and weight
//             gradients)
//   attention 4 hq d (causal pairs of step 0's keys + k own-row keys of the later steps) per
//             step k, x3; useful pairs only (a row's keys at or before it in its sequence)
//   lm_head   2 R H Vd per step, x2 (frozen rows: forward + the input's gradient)
//   target    2 R H Vd once: the target's distribution over the draft vocabulary (no grad)
//
// eagle3_loss forms the target's distribution once at every packed position, each sequence's
// first included, which no step scores: those S products are work but not useful, so they are
// reported apart (target_unscored), not in total().
#include <cstdint>
#include <vector>

namespace hsring::bench {

struct Eagle3StepFlops {
    double fc = 0, layers = 0, attention = 0, lm_head = 0, target = 0;
    double target_unscored = 0;  // not counted in total()
    double total() const { return fc + layers + attention + lm_head + target; }
    double computed() const { return total() + target_unscored; }
};

// `seq_lens`: the batch's sequences (tokens each); hq/hkv/d: attention heads, kv heads, head dim.
inline Eagle3StepFlops eagle3_step_flops(const std::vector<std::int64_t>& seq_lens, std::int64_t hidden,
                                         std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim,
                                         std::int64_t intermediate, std::int64_t draft_vocab, int steps) {
    double rows = 0, pairs = 0, firsts = 0;  // pairs: (row, step-0 key) with the key at or before the row
    for (const std::int64_t len : seq_lens) {
        if (len > 0) firsts += 1;
        const double n = len > 1 ? double(len - 1) : 0.0;
        rows += n;
        pairs += n * (n + 1) / 2;
    }
    const double h = double(hidden), q = double(heads * head_dim), kv = double(kv_heads * head_dim);
    const double i = double(intermediate), vd = double(draft_vocab);
    Eagle3StepFlops f;
    f.fc = 2.0 * rows * 3 * h * h * 2;
    const double layer = 2.0 * rows * (2 * h * (q + 2 * kv) + q * h + 3 * h * i);
    for (int k = 0; k < steps; ++k) {
        f.layers += 3 * layer;
        f.attention += 3 * 4.0 * q * (pairs + rows * k);
        f.lm_head += 2 * (2.0 * rows * h * vd);
    }
    f.target = 2.0 * rows * h * vd;
    f.target_unscored = 2.0 * firsts * h * vd;
    return f;
}

} // namespace hsring::bench
