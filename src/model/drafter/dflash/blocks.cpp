#include "model/drafter/dflash/blocks.hpp"

#include "hsring/error.hpp"
#include "data/splitmix.hpp"
#include "model/ops/attention.hpp"
#include "model/ops/host_copy.hpp"
#include "model/ops/tensor_init.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace hsring::model {
namespace {

void check_inputs(const at::Tensor& tokens, const at::Tensor& loss_mask, std::int64_t block_size,
                  const at::Tensor& host_loss_mask) {
    if (tokens.dim() != 1 || tokens.scalar_type() != at::kLong)
        fail("DFlash batch: tokens must be a 1-D int64 tensor");
    if (loss_mask.dim() != 1 || loss_mask.size(0) != tokens.size(0))
        fail("DFlash batch: loss_mask must be 1-D with one entry per token ({}), got {} entries", tokens.size(0),
             loss_mask.dim() == 1 ? loss_mask.size(0) : -1);
    if (block_size < 2) fail("DFlash block_size {} must be at least 2", block_size);
    if (host_loss_mask.defined() && (host_loss_mask.dim() != 1 || host_loss_mask.size(0) != loss_mask.size(0)))
        fail("DFlash batch: the host loss mask has {} entries for {} tokens", host_loss_mask.numel(), loss_mask.size(0));
}

// The sequence each token belongs to's first token (host).
std::vector<std::int64_t> seq_begin_of_tokens(const std::vector<std::int64_t>& cu) {
    std::vector<std::int64_t> out(static_cast<std::size_t>(cu.back()));
    for (std::size_t s = 0; s + 1 < cu.size(); ++s)
        for (std::int64_t t = cu[s]; t < cu[s + 1]; ++t) out[static_cast<std::size_t>(t)] = cu[s];
    return out;
}

} // namespace

DFlashBlocks dflash_blocks_at(const at::Tensor& tokens, const at::Tensor& loss_mask,
                              const std::vector<std::int64_t>& cu, std::int64_t block_size,
                              std::int64_t mask_token_id, const std::vector<std::int64_t>& anchors, double gamma,
                              const at::Tensor& host_loss_mask) {
    check_inputs(tokens, loss_mask, block_size, host_loss_mask);
    const at::Device dev = tokens.device();
    auto seqs = PackedSequences::make(cu, tokens.size(0), dev, "DFlash batch");
    const auto begin_of = seq_begin_of_tokens(cu);
    DFlashBlocks b;
    b.block_size = block_size;
    b.anchors = anchors;
    const std::size_t rows = anchors.size() * static_cast<std::size_t>(block_size);
    std::vector<std::int64_t> src(rows), pos(rows), slot(rows);
    std::vector<std::uint8_t> inside(rows);
    for (std::size_t j = 0; j < anchors.size(); ++j) {
        const std::int64_t a = anchors[j];
        if (a < 0 || a >= tokens.size(0)) fail("DFlash anchor {} outside the batch of {} tokens", a, tokens.size(0));
        const std::int64_t begin = begin_of[static_cast<std::size_t>(a)];
        const std::int64_t end = *std::upper_bound(cu.begin(), cu.end(), a);
        if (j > 0 && b.seq_begin.back() == begin && anchors[j - 1] >= a)
            fail("DFlash anchors must be sorted and distinct within each sequence");
        if (j > 0 && b.seq_begin.back() > begin) fail("DFlash anchors must come sequence by sequence");
        b.seq_begin.push_back(begin);
        for (std::int64_t k = 0; k < block_size; ++k) {
            const std::size_t r = j * static_cast<std::size_t>(block_size) + static_cast<std::size_t>(k);
            inside[r] = a + k < end;
            src[r] = inside[r] ? a + k : a;  // any in-range index; masked out below
            pos[r] = a - begin + k;
            slot[r] = k;
        }
    }
    auto longs = [&](const std::vector<std::int64_t>& v) { return longs_to_device(v, dev); };
    at::Tensor src_t = longs(src), slot_t = longs(slot);
    at::Tensor inside_t =
        host_to_device(at::from_blob(inside.data(), {static_cast<std::int64_t>(rows)}, at::kByte), dev).to(at::kBool);
    at::Tensor mask_f = loss_mask.to(at::kFloat);
    at::Tensor at_src = tokens.index_select(0, src_t);
    b.block_tokens = at::where(slot_t == 0, at_src, at::full_like(at_src, mask_token_id));
    b.block_positions = longs(pos);
    b.labels = at::where(inside_t, at_src, at::zeros_like(at_src));
    at::Tensor lm = mask_f.index_select(0, src_t);
    at::Tensor live = inside_t & (slot_t > 0);
    at::Tensor decay = gamma > 0 ? at::exp(-(slot_t - 1).clamp_min(0).to(at::kFloat) / gamma) : at::ones_like(lm);
    b.weights = at::where(live, lm * decay, at::zeros_like(lm));
    b.counted = live & (lm > 0.5);
    b.context_positions = seqs.positions(dev);
    // The scored rows (weights > 0) from the host's copy of the mask, with the weights' own fp32
    // arithmetic (lm * exp(-(k - 1) / gamma)): no nonzero() on the device, which waits for it.
    const at::Tensor host = host_loss_mask.defined() ? host_loss_mask : loss_mask.is_cpu() ? loss_mask : at::Tensor();
    if (host.defined()) {
        const at::Tensor hm = host.to(at::kCPU, at::kFloat).contiguous();
        const float* h = hm.data_ptr<float>();
        std::vector<std::int64_t> scored;
        for (std::size_t r = 0; r < rows; ++r) {
            if (!inside[r] || slot[r] == 0) continue;
            const float decay =
                gamma > 0 ? std::exp(-static_cast<float>(std::max<std::int64_t>(slot[r] - 1, 0)) / static_cast<float>(gamma))
                          : 1.f;
            if (h[src[r]] * decay > 0.f) scored.push_back(static_cast<std::int64_t>(r));
        }
        b.scored = longs(scored);
    }
    return b;
}

std::vector<std::int64_t> valid_dflash_anchors(const float* m, std::int64_t begin, std::int64_t end,
                                               std::int64_t block_size) {
    std::vector<std::int64_t> valid;
    for (std::int64_t p = begin; p + block_size <= end; ++p)  // p + 1 < end follows from block_size >= 2
        if (m[p] > 0.5f && m[p + 1] > 0.5f) valid.push_back(p);
    return valid;
}

namespace {

// min(num_anchors, |valid|) of `valid`, uniformly without replacement, ascending.
std::vector<std::int64_t> pick_anchors(const std::vector<std::int64_t>& valid, std::int64_t num_anchors,
                                       at::Generator& gen) {
    if (valid.empty()) return {};
    const auto n = std::min<std::int64_t>(num_anchors, static_cast<std::int64_t>(valid.size()));
    // n smallest of uniform keys = a uniform n-subset.
    at::Tensor keys = at::rand({static_cast<std::int64_t>(valid.size())}, gen);
    at::Tensor pick = std::get<1>(at::topk(keys, n, 0, /*largest=*/false, /*sorted=*/false)).contiguous();
    const std::int64_t* pi = pick.data_ptr<std::int64_t>();
    std::vector<std::int64_t> chosen;
    for (std::int64_t i = 0; i < n; ++i) chosen.push_back(valid[static_cast<std::size_t>(pi[i])]);
    std::sort(chosen.begin(), chosen.end());
    return chosen;
}

// Anchors of every sequence, sequence s drawn with gen_of(s).
template <typename GenOf>
DFlashBlocks blocks_from_rule(const at::Tensor& tokens, const at::Tensor& loss_mask, const std::vector<std::int64_t>& cu,
                              std::int64_t block_size, std::int64_t mask_token_id, std::int64_t num_anchors,
                              double gamma, GenOf&& gen_of, const at::Tensor& host_loss_mask = {}) {
    check_inputs(tokens, loss_mask, block_size, host_loss_mask);
    if (num_anchors <= 0) fail("DFlash num_anchors must be positive, got {}", num_anchors);
    PackedSequences::make(cu, tokens.size(0), at::kCPU, "DFlash batch");
    // The host's copy when given: a device mask's copy back waits for all queued device work.
    at::Tensor mask = (host_loss_mask.defined() ? host_loss_mask : loss_mask).to(at::kCPU, at::kFloat).contiguous();
    const float* m = mask.data_ptr<float>();
    std::vector<std::int64_t> anchors;
    for (std::size_t s = 0; s + 1 < cu.size(); ++s) {
        const auto valid = valid_dflash_anchors(m, cu[s], cu[s + 1], block_size);
        if (valid.empty()) continue;
        const auto chosen = pick_anchors(valid, num_anchors, gen_of(s));
        anchors.insert(anchors.end(), chosen.begin(), chosen.end());
    }
    return dflash_blocks_at(tokens, loss_mask, cu, block_size, mask_token_id, anchors, gamma, mask);
}

} // namespace

DFlashBlocks sample_dflash_blocks(const at::Tensor& tokens, const at::Tensor& loss_mask,
                                  const std::vector<std::int64_t>& cu, std::int64_t block_size,
                                  std::int64_t mask_token_id, std::int64_t num_anchors, double gamma,
                                  at::Generator& gen, const at::Tensor& host_loss_mask) {
    if (gen.device().type() != at::kCPU) fail("DFlash anchor sampling needs a CPU generator");
    return blocks_from_rule(tokens, loss_mask, cu, block_size, mask_token_id, num_anchors, gamma,
                            [&](std::size_t) -> at::Generator& { return gen; }, host_loss_mask);
}

DFlashBlocks eval_dflash_blocks(const at::Tensor& tokens, const at::Tensor& loss_mask,
                                const std::vector<std::int64_t>& cu, std::int64_t block_size,
                                std::int64_t mask_token_id, std::int64_t num_anchors, double gamma,
                                std::uint64_t seed, const std::vector<std::uint64_t>& sample_ids) {
    if (sample_ids.size() + 1 != cu.size())
        fail("DFlash evaluation: {} sample ids for {} sequences", sample_ids.size(),
             static_cast<std::int64_t>(cu.size()) - 1);
    at::Generator gen;
    return blocks_from_rule(tokens, loss_mask, cu, block_size, mask_token_id, num_anchors, gamma,
                            [&](std::size_t s) -> at::Generator& {
                                using namespace data::detail;
                                gen = cpu_generator(mix64(seed ^ mix64(sample_ids[s] + kGolden)));
                                return gen;
                            });
}

} // namespace hsring::model
