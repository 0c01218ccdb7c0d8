#include "model/drafter/dflash/flops.hpp"

#include "model/ops/attention.hpp"

#include <ATen/ATen.h>

namespace hsring::model {

DFlashStepFlops dflash_step_flops(const DFlashConfig& c, std::int64_t context_tokens,
                                  const std::vector<std::int64_t>& anchors, const std::vector<std::int64_t>& seq_begin,
                                  std::int64_t scored_rows, const BlockAttentionLayout& layout) {
    const std::int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
    const std::int64_t rows = static_cast<std::int64_t>(anchors.size()) * c.block_size, t = context_tokens;
    const double n = static_cast<double>(c.num_layers);
    DFlashStepFlops f;
    if (anchors.empty()) return f;  // no block: the step computes nothing
    const double per_layer = gemm_flops(rows, h, q) + 2 * gemm_flops(rows, h, kv) + gemm_flops(rows, q, h) +
                             3 * gemm_flops(rows, h, c.intermediate_size);
    f.layers = n * 3 * per_layer;
    f.context_kv = n * 3 * 2 * gemm_flops(t, h, kv);
    // Useful: each block's rows against the keys its mask lets through (context before its
    // anchor, its own block). Computed: each group's rows against all of the group's keys.
    double useful = 0, computed = 0;
    for (std::size_t b = 0; b < anchors.size(); ++b)
        useful += 2 * gemm_flops(c.num_heads * c.block_size, c.head_dim, anchors[b] - seq_begin[b] + c.block_size);
    for (const auto& g : block_groups(anchors, seq_begin, c.block_size, layout))
        computed += 2 * gemm_flops(c.num_heads * g.rows, c.head_dim, g.key_len);  // QK^T, then PV
    f.attention = n * 3 * useful;
    f.attention_padded = n * 3 * (computed - useful);
    f.fc = 2 * gemm_flops(t, c.num_context_layers() * h, h);
    f.lm_head = 2 * gemm_flops(scored_rows, h, c.vocab_size);
    return f;
}

DFlashStepFlops dflash_step_flops(const DFlashConfig& c, std::int64_t context_tokens, const DFlashBlocks& blocks,
                                  const BlockAttentionLayout& layout) {
    const std::int64_t scored = blocks.num_blocks() ? (blocks.weights > 0).sum().item<std::int64_t>() : 0;
    return dflash_step_flops(c, context_tokens, blocks.anchors, blocks.seq_begin, scored, layout);
}

} // namespace hsring::model
