#pragma once
// The two attention patterns hsring needs, each routed to the fastest kernel LibTorch offers:
//  - the target's block-diagonal causal attention over a packed batch (positions restart per
//    sequence): the varlen flash kernel on CUDA (bf16/fp16), one causal SDPA per sequence else;
//  - the DFlash drafter's block attention: block i sees its sequence's context strictly before
//    its anchor plus its own block (non-causal). Blocks are processed in groups of consecutive
//    blocks of one sequence, so a group's keys are [context prefix | the group's blocks] and
//    the masked-out part of the context is never computed (see BlockAttention).
// GQA everywhere: q [rows, Hq, D], k/v [rows, Hkv, D], Hq a multiple of Hkv (HF repeat_kv
// order: query head h uses kv head h / (Hq/Hkv)).
#include "hsring/attention_keys.hpp"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hsring::model {

// A packed batch: S sequences back to back, cu = [0, len0, len0+len1, ..., T].
struct PackedSequences {
    std::vector<std::int64_t> cu;
    std::int64_t max_len = 0;
    at::Tensor cu_device;  // int32 copy on the compute device (CUDA only; the varlen kernel)

    // Validates cu against `total` tokens; `what` names the caller in errors.
    static PackedSequences make(const std::vector<std::int64_t>& cu, std::int64_t total, at::Device device,
                                const std::string& what);
    std::int64_t count() const { return static_cast<std::int64_t>(cu.size()) - 1; }
    std::int64_t total() const { return cu.back(); }
    // Position of every token within its sequence, [T] int64 on `device`.
    at::Tensor positions(at::Device device) const;
};

// Block-diagonal causal attention; returns [T, Hq, D] in q's dtype.
at::Tensor causal_packed_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const PackedSequences& seqs, double scale);

// How the drafter's block attention is cut into kernel calls and which kernel runs them.
//  - group_blocks: consecutive blocks of one sequence per call. Small groups compute little of
//    the masked-out context (a group's keys reach its last anchor) and of the other blocks'
//    rows (every row of a group sees the group's block keys through the mask).
//  - key_pad: key lengths are rounded up to a multiple of this, so that few distinct shapes
//    occur (kernels that build a plan per shape, cuDNN's, pay it once per shape).
//  - kernel: the SDPA backend for the masked calls on CUDA. Auto = LibTorch's choice;
//    Efficient = the memory-efficient (cutlass) kernel, no per-shape plans; CuDNN = cuDNN's
//    fused attention. CPU always runs LibTorch's CPU path.
enum class AttentionKernel { Auto, Efficient, CuDNN };
struct BlockAttentionLayout {
    std::int64_t group_blocks = kAttentionGroupBlocks;  // hsring/attention_keys.hpp says why
    std::int64_t key_pad = kAttentionKeyPad;
    AttentionKernel kernel = AttentionKernel::Auto;
};
// Restricts LibTorch's SDPA backend choice (on CUDA, for a kernel other than Auto) for the calls
// in its scope and restores the process-wide flags after: the drafter's masked block attention,
// and decoding, whose key count grows by one each step (cuDNN, LibTorch's choice for bf16 on the
// H200, builds a plan per shape: ~250 us of host time per call, a third of a decode step). Each
// process calls SDPA from one thread.
class SdpaBackendScope {
public:
    SdpaBackendScope(AttentionKernel k, bool cuda);
    ~SdpaBackendScope();
    SdpaBackendScope(const SdpaBackendScope&) = delete;
    SdpaBackendScope& operator=(const SdpaBackendScope&) = delete;

private:
    bool active_;
    bool flash_ = true, eff_ = true, math_ = true, cudnn_ = true;
};

// "auto" | "efficient" | "cudnn"; throws hsring::Error naming `what` for anything else.
AttentionKernel parse_attention_kernel(const std::string& name, const std::string& what);
const char* to_string(AttentionKernel k);

// One group of consecutive blocks of one sequence: rows [row_begin, row_begin + rows) of the
// block queries, context rows [ctx_begin, ctx_begin + ctx_len) (ctx_len = the group's largest
// anchor relative to its sequence start), keys [context prefix | own blocks | padding].
struct BlockGroup {
    std::int64_t ctx_begin = 0, ctx_len = 0;
    std::int64_t row_begin = 0, rows = 0;
    std::int64_t key_len = 0;  // ctx_len + rows rounded up to a multiple of key_pad (few distinct shapes)
    at::Tensor bias;           // [1, 1, kv_repeat * rows, key_len], 0 = visible, -inf = masked
};

struct BlockAttention {
    std::int64_t block_size = 0;
    AttentionKernel kernel = AttentionKernel::Auto;
    std::int64_t kv_repeat = 1;  // Hq / Hkv
    std::vector<BlockGroup> groups;
    std::int64_t context_tokens = 0;  // T: rows of k_ctx / v_ctx
    // Every group's keys in one gather: rows of [context (T) | block rows (R) | one zero row]
    // (int64, on the device), group after group; key_lens / row_counts split the result.
    at::Tensor key_index;
    std::vector<std::int64_t> key_lens, row_counts;
    // For the gather's backward: where each block row sits in the gathered rows ([R] int64, on
    // the device), and per group {context begin, context length, first gathered row}.
    at::Tensor block_row_pos;
    std::vector<std::int64_t> context_spans;
};

// The groups' geometry (no masks) for blocks given by their anchors (global token index) and
// their sequence's first token; blocks must be sorted by anchor within each sequence, sequences
// in order. Host only: the attention's FLOP count (drafter/dflash/flops.hpp) reads the same shapes.
std::vector<BlockGroup> block_groups(const std::vector<std::int64_t>& anchors,
                                     const std::vector<std::int64_t>& seq_begin_of_block, std::int64_t block_size,
                                     const BlockAttentionLayout& layout);

// block_groups with their masks and key gather, built once per batch (T = context_tokens
// context rows) on `device` in `dtype` and shared by every layer.
BlockAttention plan_block_attention(const std::vector<std::int64_t>& anchors,
                                    const std::vector<std::int64_t>& seq_begin_of_block, std::int64_t block_size,
                                    std::int64_t context_tokens, const BlockAttentionLayout& layout,
                                    std::int64_t kv_repeat, at::Device device,
                                    at::ScalarType dtype);

// q, k_blk, v_blk: [blocks * block_size, H, D]; k_ctx, v_ctx: [T, Hkv, D]. Returns [rows, Hq, D].
at::Tensor block_attention(const at::Tensor& q, const at::Tensor& k_ctx, const at::Tensor& v_ctx,
                           const at::Tensor& k_blk, const at::Tensor& v_blk, const BlockAttention& plan,
                           double scale);

} // namespace hsring::model
