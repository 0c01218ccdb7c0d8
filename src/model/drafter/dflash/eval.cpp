#include "model/drafter/dflash/eval.hpp"

#include "hsring/error.hpp"

#include <ATen/ATen.h>

namespace hsring::model {
namespace {

std::vector<double> host_doubles(const at::Tensor& t) {
    at::Tensor c = t.to(at::kCPU, at::kDouble).contiguous();
    return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

} // namespace

DFlashEvalSums evaluate_dflash(DFlashDrafter& drafter, const TargetHead& head, const DFlashBatch& batch,
                               const DFlashBlocks& blocks, const DFlashLossOptions& options,
                               at::Tensor* drafter_output) {
    check_dflash_batch(drafter, head, batch);
    at::NoGradGuard no_grad;
    // Scored as inference runs the drafter: in the compute dtype, also for a run that trains with
    // FP8 matmuls or an FP8 LM head (so the held-out numbers of bf16 and fp8 runs compare).
    DFlashLossOptions eval_options = options;
    eval_options.fp8_matmul = false;
    eval_options.fp8_lm_head = nullptr;
    at::Tensor out;
    if (blocks.num_blocks() > 0) out = dflash_hidden(drafter, head, batch, blocks, eval_options);
    DFlashLossResult r = dflash_loss_of_output(out, head, blocks, eval_options);
    if (drafter_output) *drafter_output = out;
    DFlashEvalSums s;
    s.loss_sum = r.loss_sum.item<double>();
    s.weight_sum = r.weight_sum.item<double>();
    s.correct = host_doubles(r.correct);
    s.counted = host_doubles(r.counted);
    s.num_blocks = r.num_blocks;
    return s;
}

DFlashEvalSums evaluate_dflash(DFlashDrafter& drafter, const TargetHead& head, const DFlashBatch& batch,
                               const std::vector<std::uint64_t>& sample_ids, std::uint64_t seed,
                               const DFlashLossOptions& options) {
    const auto& c = drafter->config();
    DFlashBlocks blocks = eval_dflash_blocks(batch.tokens, batch.loss_mask, batch.cu_seqlens, c.block_size,
                                             c.mask_token_id, options.num_anchors, options.gamma, seed, sample_ids);
    return evaluate_dflash(drafter, head, batch, blocks, options);
}

} // namespace hsring::model
