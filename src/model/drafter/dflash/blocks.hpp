#pragma once
// DFlash training blocks over a packed batch: anchor sampling, block inputs and labels.
//
// Anchor rule (the public DFlash trainers', SpecForge / TorchSpec): in a sequence [begin, end),
// position p is a valid anchor iff
//     loss_mask[p] = 1  and  loss_mask[p+1] = 1  and  p + B <= end
// (the anchor and the first token it drafts are trained tokens, and the whole block fits), so
// slot 1 of every sampled block carries weight. Per sequence, min(num_anchors, #valid) anchors
// are drawn uniformly without replacement among the valid ones; a sequence shorter than a block
// or without two consecutive trained tokens gets none.
//
// Block j of anchor a is B slots at positions a .. a+B-1 (relative to the sequence start): slot
// 0 holds the anchor's token, slots 1.. the mask token; slot k is trained to predict the token
// at a+k. Slot weight = loss_mask[a+k] * exp(-(k-1)/gamma) (gamma > 0; 1 otherwise) for 1 <= k
// and a+k inside the sequence, 0 for slot 0 and past the sequence end (only blocks placed by
// dflash_blocks_at can reach past it). Blocks are laid out sequence by sequence, sorted by
// anchor (what block attention's grouping needs).
//
// Anchor choice runs on the host with a CPU generator: the same seed gives the same blocks on
// CPU and GPU. It reads loss_mask on the host (one small device->host copy per batch).
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace hsring::model {

struct DFlashBlocks {
    std::int64_t block_size = 0;
    std::vector<std::int64_t> anchors;    // global token index of each block's anchor
    std::vector<std::int64_t> seq_begin;  // first token of each block's sequence
    // Device tensors, one row per block slot ([blocks * block_size]):
    at::Tensor block_tokens;     // int64: anchor token at slot 0, mask token elsewhere
    at::Tensor block_positions;  // int64: position within the sequence (anchor's + slot)
    at::Tensor labels;           // int64: token at anchor + slot (0 where outside the sequence)
    at::Tensor weights;          // fp32: loss weight (see above)
    at::Tensor counted;          // bool: slot > 0, inside the sequence, loss_mask > 0.5 (accuracy)
    at::Tensor context_positions;  // [T] int64: each token's position within its sequence
    // int64 [rows with weight > 0], ascending: (weights > 0).nonzero() found on the host, where the
    // blocks were made from a host loss mask; undefined otherwise.
    at::Tensor scored;

    std::int64_t num_blocks() const { return static_cast<std::int64_t>(anchors.size()); }
    std::int64_t rows() const { return num_blocks() * block_size; }
};

// The valid anchors (global token indices, ascending) of the sequence [begin, end) of a host
// loss mask (values > 0.5 are trained tokens).
std::vector<std::int64_t> valid_dflash_anchors(const float* loss_mask, std::int64_t begin, std::int64_t end,
                                               std::int64_t block_size);

// Anchors drawn with `gen` (a CPU generator). tokens [T] int64 and loss_mask [T] (any numeric
// or bool dtype) live on the compute device; cu_seqlens are host offsets. host_loss_mask: the same
// mask on the host if the caller has it (else loss_mask is copied back: a wait for the device).
DFlashBlocks sample_dflash_blocks(const at::Tensor& tokens, const at::Tensor& loss_mask,
                                  const std::vector<std::int64_t>& cu_seqlens, std::int64_t block_size,
                                  std::int64_t mask_token_id, std::int64_t num_anchors, double gamma,
                                  at::Generator& gen, const at::Tensor& host_loss_mask = {});

// Evaluation anchors: the same rule and count, sequence s drawn with its own CPU generator
// seeded mix64(seed ^ mix64(sample_ids[s] + golden)) (splitmix64, data/splitmix.hpp), so a
// sample gets the same blocks whatever batch it is packed into, on any device and in any
// process. sample_ids has one entry per sequence.
DFlashBlocks eval_dflash_blocks(const at::Tensor& tokens, const at::Tensor& loss_mask,
                                const std::vector<std::int64_t>& cu_seqlens, std::int64_t block_size,
                                std::int64_t mask_token_id, std::int64_t num_anchors, double gamma,
                                std::uint64_t seed, const std::vector<std::uint64_t>& sample_ids);

// Blocks at given anchors (global token indices, sorted within each sequence): for tests and
// evaluation. host_loss_mask: loss_mask's values on the host, when the caller has them (a CPU
// loss_mask is its own): the blocks then list their scored rows (DFlashBlocks::scored).
DFlashBlocks dflash_blocks_at(const at::Tensor& tokens, const at::Tensor& loss_mask,
                              const std::vector<std::int64_t>& cu_seqlens, std::int64_t block_size,
                              std::int64_t mask_token_id, const std::vector<std::int64_t>& anchors, double gamma,
                              const at::Tensor& host_loss_mask = {});

} // namespace hsring::model
