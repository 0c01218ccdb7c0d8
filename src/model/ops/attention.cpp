#include "model/ops/attention.hpp"

#include "hsring/error.hpp"
#include "model/ops/host_copy.hpp"
#include "model/ops/kernel_call.hpp"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/autograd.h>

#include <algorithm>
#include <limits>
#if HSRING_KERNELS_ON
#include "kernels/block_attention_bias.hpp"

#include <c10/cuda/CUDAGuard.h>
#endif

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
        p.cu_device = ints_to_device(c32, device);
    }
    return p;
}

at::Tensor PackedSequences::positions(at::Device device) const {
    std::vector<std::int64_t> pos(static_cast<std::size_t>(total()));
    for (std::size_t s = 0; s + 1 < cu.size(); ++s)
        for (std::int64_t t = cu[s]; t < cu[s + 1]; ++t) pos[static_cast<std::size_t>(t)] = t - cu[s];
    return longs_to_device(pos, device);
}

namespace {

bool flash_varlen_ok(const at::Tensor& q) {
    const auto d = q.size(-1);
    return q.is_cuda() && (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf) && d % 8 == 0 &&
           d <= 256;
}

} // namespace

SdpaBackendScope::SdpaBackendScope(AttentionKernel k, bool cuda) : active_(cuda && k != AttentionKernel::Auto) {
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

SdpaBackendScope::~SdpaBackendScope() {
    if (!active_) return;
    auto& ctx = at::globalContext();
    ctx.setSDPUseFlash(flash_);
    ctx.setSDPUseMemEfficient(eff_);
    ctx.setSDPUseMath(math_);
    ctx.setSDPUseCuDNN(cudnn_);
}

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
        // Keys padded coarsely (not just to the kernels' 16): anchors differ every batch, and
        // cuDNN plans per shape, every new one on first use (seen on the H200: 2 s of a 3 s step
        // with 32-block groups padded to 16). padded_key_len says how.
        g.key_len = padded_key_len(g.ctx_len + g.rows, pad);
        groups.push_back(std::move(g));
        b0 = b1;
    }
    return groups;
}

namespace {

// Every group's bias in one kernel launch (src/kernels/block_attention_bias.hpp) when the build
// has the kernels and the plan is for a GPU; false = build them with ATen ops instead.
// host_desc: the groups' {bias offset, first mask row, mask rows, key_len}, as group_desc holds
// them on the device; the views into the one bias buffer are cut where they say.
bool block_attention_bias_kernel(const std::int64_t* host_desc, const at::Tensor& group_desc, const at::Tensor& ctx_end,
                                 const at::Tensor& own_begin, BlockAttention& plan, std::int64_t bias_elems,
                                 std::int64_t max_bias, at::ScalarType dtype) {
#if HSRING_KERNELS_ON
    if (!group_desc.is_cuda() || !kernel_call::supported(dtype)) return false;
    const c10::cuda::CUDAGuard guard(group_desc.device());
    const auto kdt = kernel_call::dtype(dtype);
    const std::int64_t vec = kernels::block_bias_vector_width(kdt);
    bool vectorized = true;
    for (const auto& g : plan.groups) vectorized = vectorized && g.key_len % vec == 0;
    at::Tensor flat = at::empty({bias_elems}, group_desc.options().dtype(dtype));
    kernels::BlockBiasArgs a;
    a.out = flat.data_ptr();
    a.groups = group_desc.data_ptr<std::int64_t>();
    a.num_groups = static_cast<std::int64_t>(plan.groups.size());
    a.max_elements = max_bias;
    a.ctx_end = ctx_end.data_ptr<std::int64_t>();
    a.own_begin = own_begin.data_ptr<std::int64_t>();
    a.block_size = plan.block_size;
    a.vectorized = vectorized;  // offsets are sums of rows x key_len: multiples of vec when key_len is
    a.dtype = kdt;
    a.stream = kernel_call::stream(flat);
    kernel_call::check(kernels::block_attention_bias(a), "block attention mask kernel ({} groups, {} elements)",
                       a.num_groups, bias_elems);
    for (std::size_t gi = 0; gi < plan.groups.size(); ++gi) {
        const std::int64_t* d = host_desc + 4 * gi;
        plan.groups[gi].bias = flat.narrow(0, d[0], d[2] * d[3]).view({1, 1, d[2], d[3]});
    }
    return true;
#else
    (void)host_desc, (void)group_desc, (void)ctx_end, (void)own_begin, (void)plan, (void)bias_elems, (void)max_bias, (void)dtype;
    return false;
#endif
}

} // namespace

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
    // One host buffer, written in place and copied to the device once (pinned and asynchronous
    // on a GPU: the host goes on to queue the layers), holding:
    //   key index    the gather's rows of [context (T) | block rows (R) | zero row], group after group
    //   row places   each block row's place among the gathered rows
    //   ctx_end      per mask row (kv_repeat x R: query rows are laid out [kv head][repeat][row], see
    //   own_begin    block_attention) the key columns it sees: [0, ctx_end) and [own, own + B)
    //   groups       per group {bias offset, first mask row, mask rows, key_len} (the bias kernel's)
    // (Vectors and at::tensor() took ~4 ms of host time per recipe step while the GPU waited.)
    const std::int64_t t = context_tokens, rows = static_cast<std::int64_t>(anchors.size()) * block_size;
    const auto num_groups = static_cast<std::int64_t>(plan.groups.size());
    std::int64_t n = 0;
    for (const auto& g : plan.groups) n += g.key_len;
    const std::int64_t mask_rows = kv_repeat * rows;
    const std::int64_t total = n + rows + 2 * mask_rows + 4 * num_groups;
    const bool cuda = device.is_cuda();
    auto cpu_long = at::TensorOptions().dtype(at::kLong);
    at::Tensor host = at::empty({total}, cuda ? cpu_long.pinned_memory(true) : cpu_long);
    std::int64_t* const index = host.data_ptr<std::int64_t>();
    std::int64_t* const row_pos = index + n;
    std::int64_t* const ctx_end = row_pos + rows;
    std::int64_t* const own_begin = ctx_end + mask_rows;
    std::int64_t* const group_desc = own_begin + mask_rows;
    std::int64_t k = 0, rp = 0, mr = 0, bias_elems = 0, max_bias = 0;
    for (std::size_t gi = 0; gi < plan.groups.size(); ++gi) {
        const auto& g = plan.groups[gi];
        plan.context_spans.insert(plan.context_spans.end(), {g.ctx_begin, g.ctx_len, k});
        for (std::int64_t c = 0; c < g.ctx_len; ++c) index[k++] = g.ctx_begin + c;
        for (std::int64_t r = 0; r < g.rows; ++r) {
            row_pos[rp++] = k;
            index[k++] = t + g.row_begin + r;
        }
        for (std::int64_t p = g.ctx_len + g.rows; p < g.key_len; ++p) index[k++] = t + rows;
        plan.key_lens.push_back(g.key_len);
        plan.row_counts.push_back(g.rows);
        const std::int64_t m = kv_repeat * g.rows;
        std::int64_t* desc = group_desc + 4 * gi;
        desc[0] = bias_elems;
        desc[1] = mr;
        desc[2] = m;
        desc[3] = g.key_len;
        bias_elems += m * g.key_len;
        max_bias = std::max(max_bias, m * g.key_len);
        // Row r of the group (block j = row_begin / B + r / B) sees context columns before its
        // anchor and the columns of its own block.
        for (std::int64_t rep = 0; rep < kv_repeat; ++rep)
            for (std::int64_t r = 0; r < g.rows; ++r, ++mr) {
                ctx_end[mr] = anchors[static_cast<std::size_t>((g.row_begin + r) / block_size)] - g.ctx_begin;
                own_begin[mr] = g.ctx_len + r / block_size * block_size;
            }
    }
    HSRING_ASSERT(k == n && rp == rows && mr == mask_rows, "the groups cover every key and block row once");
    const at::Tensor all = cuda ? host.to(device, /*non_blocking=*/true) : host;
    plan.key_index = all.narrow(0, 0, n);
    plan.block_row_pos = all.narrow(0, n, rows);
    const at::Tensor ctx_end_d = all.narrow(0, n + rows, mask_rows), own_begin_d = all.narrow(0, n + rows + mask_rows, mask_rows);
    if (block_attention_bias_kernel(group_desc, all.narrow(0, n + rows + 2 * mask_rows, 4 * num_groups), ctx_end_d,
                                    own_begin_d, plan, bias_elems, max_bias, dtype))
        return plan;
    std::int64_t max_key_len = 0, mask_row = 0;
    for (const auto& g : plan.groups) max_key_len = std::max(max_key_len, g.key_len);
    const at::Tensor columns = at::arange(max_key_len, cpu_long.device(device));
    for (auto& g : plan.groups) {
        const std::int64_t m = kv_repeat * g.rows;
        const at::Tensor cols = columns.narrow(0, 0, g.key_len).unsqueeze(0);
        const at::Tensor end = ctx_end_d.narrow(0, mask_row, m).unsqueeze(1);
        const at::Tensor own = own_begin_d.narrow(0, mask_row, m).unsqueeze(1);
        mask_row += m;
        const at::Tensor hidden = (cols >= end) & ((cols < own) | (cols >= own + block_size));
        g.bias = at::zeros({m, g.key_len}, at::TensorOptions().device(device).dtype(dtype))
                     .masked_fill_(hidden, -std::numeric_limits<double>::infinity())
                     .view({1, 1, m, g.key_len});
    }
    return plan;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Every group's [context prefix | own block rows | zero padding] keys (or values) in one gather.
// Its backward without atomics: each block row was gathered once, so its gradient is gathered
// back; a context row was gathered by every later group of its sequence, so those gradients are
// summed group by group into an fp32 buffer (index_select's own backward, an index_add_ into a
// zero tensor of the gradient's dtype, rounds each add to bf16 and accumulates in atomics: tens of
// groups per context row at 16k-32k tokens).
struct GatherKeysFunction : public torch::autograd::Function<GatherKeysFunction> {
    static at::Tensor forward(AutogradContext* ctx, const at::Tensor& kv_ctx, const at::Tensor& kv_blk,
                              const BlockAttention& plan) {
        ctx->saved_data["block_row_pos"] = plan.block_row_pos;
        ctx->saved_data["context_spans"] = at::IntArrayRef(plan.context_spans);
        ctx->saved_data["context_rows"] = kv_ctx.size(0);
        const at::Tensor zero = at::zeros({1, kv_blk.size(1), kv_blk.size(2)}, kv_blk.options());
        return at::cat({kv_ctx, kv_blk, zero}, 0).index_select(0, plan.key_index);
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const at::Tensor g = grads[0].contiguous();
        const at::Tensor d_blk = g.index_select(0, ctx->saved_data["block_row_pos"].toTensor());
        const std::vector<std::int64_t> spans = ctx->saved_data["context_spans"].toIntVector();
        std::vector<std::int64_t> shape = g.sizes().vec();
        shape[0] = ctx->saved_data["context_rows"].toInt();
        at::Tensor acc = at::zeros(shape, g.options().dtype(at::kFloat));
        for (std::size_t i = 0; i + 2 < spans.size(); i += 3)  // {begin, length, first gathered row}
            if (spans[i + 1] > 0) acc.narrow(0, spans[i], spans[i + 1]).add_(g.narrow(0, spans[i + 2], spans[i + 1]));
        return {acc.to(g.scalar_type()), d_blk, at::Tensor()};
    }
};

} // namespace

at::Tensor block_attention(const at::Tensor& q, const at::Tensor& k_ctx, const at::Tensor& v_ctx,
                           const at::Tensor& k_blk, const at::Tensor& v_blk, const BlockAttention& plan,
                           double scale) {
    const std::int64_t hq = q.size(1), hkv = k_blk.size(1), d = q.size(2), r = plan.kv_repeat;
    HSRING_ASSERT(hq == hkv * r, "query heads {} != kv heads {} x {}", hq, hkv, r);
    if (plan.groups.empty()) return at::empty({0, hq, d}, q.options());
    // One gather builds every group's [context prefix | own blocks | zero padding] keys, one split
    // hands them out as views (GatherKeysFunction says how the gradient goes back).
    HSRING_ASSERT(k_ctx.size(0) == plan.context_tokens, "plan for {} context rows, got {}", plan.context_tokens,
                  k_ctx.size(0));
    auto gathered = [&](const at::Tensor& ctx, const at::Tensor& blk) {
        return GatherKeysFunction::apply(ctx, blk, plan).split_with_sizes(plan.key_lens, 0);
    };
    const std::vector<at::Tensor> keys = gathered(k_ctx, k_blk), values = gathered(v_ctx, v_blk);
    const std::vector<at::Tensor> queries = q.split_with_sizes(plan.row_counts, 0);
    std::vector<at::Tensor> outs;
    outs.reserve(plan.groups.size());
    // Backward runs the backward op the forward chose: the scope is needed in forward only.
    SdpaBackendScope backend(plan.kernel, q.is_cuda());
    for (std::size_t i = 0; i < plan.groups.size(); ++i) {
        const auto& g = plan.groups[i];
        auto heads_first = [](const at::Tensor& x) { return x.permute({1, 0, 2}).unsqueeze(0); };  // [1, Hkv, len, D]
        // GQA without repeating K/V: the r query heads of one kv head become r x rows query rows.
        at::Tensor qg = queries[i].view({g.rows, hkv, r, d}).permute({1, 2, 0, 3}).reshape({1, hkv, r * g.rows, d});
        at::Tensor o = at::scaled_dot_product_attention(qg, heads_first(keys[i]), heads_first(values[i]), g.bias, 0.0,
                                                        /*is_causal=*/false, scale);
        outs.push_back(o.view({hkv, r, g.rows, d}).permute({2, 0, 1, 3}).reshape({g.rows, hq, d}));
    }
    return at::cat(outs, 0);
}

} // namespace hsring::model
