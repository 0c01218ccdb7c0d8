#include "model/attention.hpp"

#include "hsring/error.hpp"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <algorithm>
#include <utility>
#include <limits>

namespace hsring::model {

PackedSequences PackedSequences::make(const std::vector<std::int64_t>& cu, std::int64_t total, at::Device device,
                                      const std::string& what) {
    if (cu.size() < 2 || cu.front() != 0 || cu.back() != total)
        fail("{}: cu_seqlens must start at 0 and end at the token count {} (got {} offsets, last {})", what, total,
             cu.size(), cu.empty() ? -1 : cu.back());
    PackedSequences p;
    p.cu = cu;
    for (std::size_t i = 1; i < cu.size(); ++i) {
        if (cu[i] < cu[i - 1]) fail("{}: cu_seqlens must not decrease (offset {} < {})", what, cu[i], cu[i - 1]);
        p.max_len = std::max(p.max_len, cu[i] - cu[i - 1]);
    }
    if (device.is_cuda()) {
        std::vector<std::int32_t> c32(cu.begin(), cu.end());
        p.cu_device = at::tensor(c32, at::TensorOptions().dtype(at::kInt)).to(device);
    }
    return p;
}

at::Tensor PackedSequences::positions(at::Device device) const {
    std::vector<std::int64_t> pos(static_cast<std::size_t>(total()));
    for (std::size_t s = 0; s + 1 < cu.size(); ++s)
        for (std::int64_t t = cu[s]; t < cu[s + 1]; ++t) pos[static_cast<std::size_t>(t)] = t - cu[s];
    return at::tensor(pos, at::TensorOptions().dtype(at::kLong)).to(device);
}

namespace {

bool flash_varlen_ok(const at::Tensor& q) {
    const auto d = q.size(-1);
    return q.is_cuda() && (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf) && d % 8 == 0 &&
           d <= 256;
}

// Restricts LibTorch's SDPA backend choice for the masked block-attention calls and restores the
// process-wide flags after (the drafter runs its attention on one thread; nothing else in a
// drafter process calls SDPA meanwhile).
class SdpaBackendScope {
public:
    SdpaBackendScope(AttentionKernel k, bool cuda) : active_(cuda && k != AttentionKernel::Auto) {
        if (!active_) return;
        auto& ctx = at::globalContext();
        flash_ = ctx.userEnabledFlashSDP();
        eff_ = ctx.userEnabledMemEfficientSDP();
        math_ = ctx.userEnabledMathSDP();
        cudnn_ = ctx.userEnabledCuDNNSDP();
        ctx.setSDPUseFlash(false);
        ctx.setSDPUseMath(false);
        ctx.setSDPUseMemEfficient(k == AttentionKernel::Efficient);
        ctx.setSDPUseCuDNN(k == AttentionKernel::CuDNN);
    }
    ~SdpaBackendScope() {
        if (!active_) return;
        auto& ctx = at::globalContext();
        ctx.setSDPUseFlash(flash_);
        ctx.setSDPUseMemEfficient(eff_);
        ctx.setSDPUseMath(math_);
        ctx.setSDPUseCuDNN(cudnn_);
    }
    SdpaBackendScope(const SdpaBackendScope&) = delete;
    SdpaBackendScope& operator=(const SdpaBackendScope&) = delete;

private:
    bool active_;
    bool flash_ = true, eff_ = true, math_ = true, cudnn_ = true;
};

} // namespace

at::Tensor causal_packed_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const PackedSequences& seqs, double scale) {
    if (flash_varlen_ok(q)) {
        // The kernel wants each operand's last dim contiguous; v arrives as a slice of the fused
        // qkv projection: make all three dense (cheap next to the attention itself).
        auto out = at::_flash_attention_forward(q.contiguous(), k.contiguous(), v.contiguous(), seqs.cu_device, seqs.cu_device, seqs.max_len, seqs.max_len,
                                                /*dropout_p=*/0.0, /*is_causal=*/true, /*return_debug_mask=*/false,
                                                scale);
        return std::get<0>(out);
    }
    // One causal SDPA per sequence (CPU, fp32 on GPU).
    std::vector<at::Tensor> outs;
    outs.reserve(seqs.cu.size());
    for (std::int64_t s = 0; s < seqs.count(); ++s) {
        const std::int64_t a = seqs.cu[s], len = seqs.cu[s + 1] - seqs.cu[s];
        if (len == 0) continue;
        auto part = [&](const at::Tensor& x) { return x.narrow(0, a, len).transpose(0, 1).unsqueeze(0); };
        at::Tensor o = at::scaled_dot_product_attention(part(q), part(k), part(v), {}, 0.0, /*is_causal=*/true, scale,
                                                        /*enable_gqa=*/true);
        outs.push_back(o.squeeze(0).transpose(0, 1));
    }
    if (outs.empty()) return at::empty_like(q);
    return at::cat(outs, 0);
}

AttentionKernel parse_attention_kernel(const std::string& name, const std::string& what) {
    if (name == "auto") return AttentionKernel::Auto;
    if (name == "efficient") return AttentionKernel::Efficient;
    if (name == "cudnn") return AttentionKernel::CuDNN;
    fail("{}: attention kernel must be auto, efficient or cudnn, got \"{}\"", what, name);
}

const char* to_string(AttentionKernel k) {
    switch (k) {
    case AttentionKernel::Auto: return "auto";
    case AttentionKernel::Efficient: return "efficient";
    case AttentionKernel::CuDNN: return "cudnn";
    }
    return "?";
}

std::vector<BlockGroup> block_groups(const std::vector<std::int64_t>& anchors,
                                     const std::vector<std::int64_t>& seq_begin_of_block, std::int64_t block_size,
                                     const BlockAttentionLayout& layout) {
    HSRING_ASSERT(anchors.size() == seq_begin_of_block.size());
    const std::int64_t group_blocks = layout.group_blocks, pad = layout.key_pad;
    HSRING_ASSERT(group_blocks > 0 && block_size > 0 && pad > 0);
    std::vector<BlockGroup> groups;
    const auto n = static_cast<std::int64_t>(anchors.size());
    for (std::int64_t b0 = 0; b0 < n;) {
        std::int64_t b1 = b0 + 1;
        while (b1 < n && b1 - b0 < group_blocks && seq_begin_of_block[b1] == seq_begin_of_block[b0]) ++b1;
        BlockGroup g;
        g.ctx_begin = seq_begin_of_block[b0];
        for (std::int64_t b = b0; b < b1; ++b) {
            HSRING_ASSERT(anchors[b] >= g.ctx_begin);
            HSRING_ASSERT(b == b0 || anchors[b] >= anchors[b - 1], "blocks must be sorted by anchor");
        }
        g.ctx_len = anchors[b1 - 1] - g.ctx_begin;
        g.row_begin = b0 * block_size;
        g.rows = (b1 - b0) * block_size;
        // Keys padded to a multiple of key_pad (not just the kernels' 16): anchors differ every
        // batch, and with a kernel that plans per shape every new shape costs a plan on first use
        // (seen on the H200: 2 s of a 3 s step with 32-block groups padded to 16).
        g.key_len = (g.ctx_len + g.rows + pad - 1) / pad * pad;
        groups.push_back(std::move(g));
        b0 = b1;
    }
    return groups;
}

BlockAttention plan_block_attention(const std::vector<std::int64_t>& anchors,
                                    const std::vector<std::int64_t>& seq_begin_of_block, std::int64_t block_size,
                                    std::int64_t context_tokens, const BlockAttentionLayout& layout,
                                    std::int64_t kv_repeat, at::Device device, at::ScalarType dtype) {
    HSRING_ASSERT(kv_repeat > 0);
    BlockAttention plan;
    plan.context_tokens = context_tokens;
    plan.block_size = block_size;
    plan.kernel = layout.kernel;
    plan.kv_repeat = kv_repeat;
    plan.groups = block_groups(anchors, seq_begin_of_block, block_size, layout);
    const auto cpu_long = at::TensorOptions().dtype(at::kLong);
    const auto dev_long = cpu_long.device(device);
    const std::int64_t t = context_tokens, rows = static_cast<std::int64_t>(anchors.size()) * block_size;
    std::vector<std::size_t> order(plan.groups.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        const auto &ga = plan.groups[a], &gb = plan.groups[b];
        return std::pair(ga.rows, ga.key_len) < std::pair(gb.rows, gb.key_len);
    });
    std::vector<std::int64_t> key_index, row_index;
    for (std::size_t i0 = 0; i0 < order.size();) {
        const BlockGroup& first = plan.groups[order[i0]];
        std::size_t i1 = i0;
        // Per block row of the bucket: its anchor relative to its group's context start; per
        // group: its context length. The mask is built from these on the device.
        std::vector<std::int64_t> thr, ctx_len;
        while (i1 < order.size() && plan.groups[order[i1]].rows == first.rows &&
               plan.groups[order[i1]].key_len == first.key_len) {
            const BlockGroup& g = plan.groups[order[i1]];
            for (std::int64_t c = 0; c < g.ctx_len; ++c) key_index.push_back(g.ctx_begin + c);
            for (std::int64_t r = 0; r < g.rows; ++r) key_index.push_back(t + g.row_begin + r);
            for (std::int64_t p = g.ctx_len + g.rows; p < g.key_len; ++p) key_index.push_back(t + rows);
            for (std::int64_t r = 0; r < g.rows; ++r) {
                row_index.push_back(g.row_begin + r);
                thr.push_back(anchors[static_cast<std::size_t>((g.row_begin + r) / block_size)] - g.ctx_begin);
            }
            ctx_len.push_back(g.ctx_len);
            ++i1;
        }
        AttentionBucket bucket;
        bucket.groups = static_cast<std::int64_t>(i1 - i0);
        bucket.rows = first.rows;
        bucket.key_len = first.key_len;
        const std::int64_t n = bucket.groups, m = bucket.rows, k = bucket.key_len;
        // Row r of a group (block r / B) sees context column c < its anchor and the columns of
        // its own block among the group's block rows [ctx_len, ctx_len + rows).
        at::Tensor a = at::tensor(thr, cpu_long).to(device).view({n, m, 1});
        at::Tensor cl = at::tensor(ctx_len, cpu_long).to(device).view({n, 1, 1});
        at::Tensor cols = at::arange(k, dev_long).view({1, 1, k});
        at::Tensor blk = at::arange(m, dev_long).div(block_size, "floor").view({1, m, 1});
        at::Tensor own = cols - cl;
        at::Tensor visible = (cols < a) | ((own >= 0) & (own < m) & (own.div(block_size, "floor") == blk));
        at::Tensor bias = at::zeros({n, m, k}, at::TensorOptions().device(device).dtype(dtype));
        bias.masked_fill_(at::logical_not(visible), -std::numeric_limits<double>::infinity());
        // Query rows are laid out [kv head][repeat][row] (see block_attention): repeat the mask.
        bucket.bias = bias.repeat({1, kv_repeat, 1}).view({n, 1, kv_repeat * m, k});
        plan.key_sizes.push_back(n * k);
        plan.row_sizes.push_back(n * m);
        plan.buckets.push_back(std::move(bucket));
        i0 = i1;
    }
    std::vector<std::int64_t> inverse(row_index.size());
    for (std::size_t k = 0; k < row_index.size(); ++k) inverse[static_cast<std::size_t>(row_index[k])] = static_cast<std::int64_t>(k);
    plan.key_index = at::tensor(key_index, cpu_long).to(device);
    plan.row_index = at::tensor(row_index, cpu_long).to(device);
    plan.row_inverse = at::tensor(inverse, cpu_long).to(device);
    return plan;
}

at::Tensor block_attention(const at::Tensor& q, const at::Tensor& k_ctx, const at::Tensor& v_ctx,
                           const at::Tensor& k_blk, const at::Tensor& v_blk, const BlockAttention& plan,
                           double scale) {
    const std::int64_t hq = q.size(1), hkv = k_blk.size(1), d = q.size(2), r = plan.kv_repeat;
    HSRING_ASSERT(hq == hkv * r, "query heads {} != kv heads {} x {}", hq, hkv, r);
    if (plan.groups.empty()) return at::empty({0, hq, d}, q.options());
    // One gather builds every group's [context prefix | own blocks | zero padding] keys, one split
    // hands them out as views: the backward is one scatter-add and one concatenation, where
    // per-group narrow + cat would fill and add a full-size zero gradient per group.
    HSRING_ASSERT(k_ctx.size(0) == plan.context_tokens, "plan for {} context rows, got {}", plan.context_tokens,
                  k_ctx.size(0));
    auto gathered = [&](const at::Tensor& ctx, const at::Tensor& blk) {
        at::Tensor all = at::cat({ctx, blk, at::zeros({1, hkv, d}, blk.options())}, 0);
        return all.index_select(0, plan.key_index).split_with_sizes(plan.key_sizes, 0);
    };
    const std::vector<at::Tensor> keys = gathered(k_ctx, k_blk), values = gathered(v_ctx, v_blk);
    const std::vector<at::Tensor> queries = q.index_select(0, plan.row_index).split_with_sizes(plan.row_sizes, 0);
    std::vector<at::Tensor> outs;
    outs.reserve(plan.buckets.size());
    // Backward runs the backward op the forward chose: the scope is needed in forward only.
    SdpaBackendScope backend(plan.kernel, q.is_cuda());
    for (std::size_t i = 0; i < plan.buckets.size(); ++i) {
        const auto& b = plan.buckets[i];
        const std::int64_t n = b.groups, m = b.rows, k = b.key_len;
        auto heads_first = [&](const at::Tensor& x) { return x.view({n, k, hkv, d}).permute({0, 2, 1, 3}); };
        // GQA without repeating K/V: the r query heads of one kv head become r x rows query rows.
        at::Tensor qb = queries[i].view({n, m, hkv, r, d}).permute({0, 2, 3, 1, 4}).reshape({n, hkv, r * m, d});
        at::Tensor o = at::scaled_dot_product_attention(qb, heads_first(keys[i]), heads_first(values[i]), b.bias, 0.0,
                                                        /*is_causal=*/false, scale);
        outs.push_back(o.view({n, hkv, r, m, d}).permute({0, 3, 1, 2, 4}).reshape({n * m, hq, d}));
    }
    return at::cat(outs, 0).index_select(0, plan.row_inverse);
}

} // namespace hsring::model
