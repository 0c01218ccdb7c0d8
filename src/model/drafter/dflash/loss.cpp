#include "model/drafter/dflash/loss.hpp"

#include "hsring/error.hpp"
#include "model/ops/chunked_ce.hpp"

#include <ATen/ATen.h>

namespace hsring::model {
namespace {

at::ScalarType compute_dtype(const DFlashLossOptions& o, at::Device device) {
    return o.compute_dtype.value_or(default_compute_dtype(device));
}

} // namespace

at::Tensor dflash_hidden(DFlashDrafter& drafter, const TargetHead& head, const DFlashBatch& batch,
                         const DFlashBlocks& blocks, const DFlashLossOptions& options) {
    DFlashInputs in;
    in.context = batch.hidden;
    // Frozen: a detached embedding lookup, no gradient path into the target's weights.
    in.block_embeds = head.embed.detach().index_select(0, blocks.block_tokens);
    in.blocks = &blocks;
    in.compute_dtype = compute_dtype(options, batch.tokens.device());
    in.attention = options.attention;
    in.recompute_layers = options.recompute_layers;
    in.fp8_matmul = options.fp8_matmul;
    return drafter->forward(in);
}

DFlashLossResult dflash_loss_for_blocks(DFlashDrafter& drafter, const TargetHead& head, const DFlashBatch& batch,
                                        const DFlashBlocks& blocks, const DFlashLossOptions& options) {
    if (blocks.num_blocks() == 0) return dflash_loss_of_output({}, head, blocks, options);
    return dflash_loss_of_output(dflash_hidden(drafter, head, batch, blocks, options), head, blocks, options);
}

DFlashLossResult dflash_loss_of_output(const at::Tensor& out, const TargetHead& head, const DFlashBlocks& blocks,
                                       const DFlashLossOptions& options) {
    const std::int64_t b = blocks.block_size;
    const at::Device dev = blocks.block_tokens.device();
    auto f32 = at::TensorOptions().device(dev).dtype(at::kFloat);
    DFlashLossResult r;
    r.num_blocks = blocks.num_blocks();
    r.correct = at::zeros({b - 1}, f32);
    r.counted = at::zeros({b - 1}, f32);
    if (r.num_blocks == 0) {
        r.loss = r.loss_sum = r.weight_sum = at::zeros({}, f32);
        return r;
    }
    // Only slots that carry weight are scored: slot 0 and masked labels cost no LM-head work. Listed
    // on the host where the blocks were made from a host mask (nonzero() waits for the device).
    at::Tensor keep = blocks.scored.defined() ? blocks.scored : (blocks.weights > 0).nonzero().squeeze(1);
    ChunkedCE ce = chunked_cross_entropy(out.index_select(0, keep), head.lm_head.detach(),
                                         blocks.labels.index_select(0, keep), blocks.weights.index_select(0, keep),
                                         options.chunk, options.fp8_lm_head);
    r.loss_sum = ce.loss_sum;
    r.weight_sum = blocks.weights.sum();
    r.loss = r.loss_sum / r.weight_sum.clamp_min(1e-6);
    // Accuracy per slot over the counted positions (loss_mask > 0.5 at the label).
    at::NoGradGuard no_grad;
    at::Tensor slot = keep.remainder(b) - 1;
    at::Tensor counted = blocks.counted.index_select(0, keep).to(at::kFloat);
    r.counted.index_add_(0, slot, counted);
    r.correct.index_add_(0, slot, counted * ce.correct.to(at::kFloat));
    return r;
}

void check_dflash_batch(DFlashDrafter& drafter, const TargetHead& head, const DFlashBatch& batch) {
    const auto& c = drafter->config();
    if (batch.hidden.dim() != 3 || batch.hidden.size(1) != batch.tokens.size(0))
        fail("DFlash batch: hidden must be [L, T, H] with T = {} tokens, got {}", batch.tokens.size(0),
             shape_str(batch.hidden.sizes()));
    if (head.embed.size(0) != c.vocab_size || head.embed.size(1) != c.hidden_size)
        fail("DFlash loss: the target head is {} but the drafter expects [{}, {}]", shape_str(head.embed.sizes()),
             c.vocab_size, c.hidden_size);
}

DFlashLossResult dflash_loss(DFlashDrafter& drafter, const TargetHead& head, const DFlashBatch& batch,
                             const DFlashLossOptions& options, at::Generator& gen) {
    const auto& c = drafter->config();
    check_dflash_batch(drafter, head, batch);
    DFlashBlocks blocks = sample_dflash_blocks(batch.tokens, batch.loss_mask, batch.cu_seqlens, c.block_size,
                                               c.mask_token_id, options.num_anchors, options.gamma, gen,
                                               batch.loss_mask_host);
    return dflash_loss_for_blocks(drafter, head, batch, blocks, options);
}

} // namespace hsring::model
