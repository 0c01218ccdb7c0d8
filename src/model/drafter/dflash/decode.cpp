#include "model/drafter/dflash/decode.hpp"

#include "hsring/error.hpp"
#include "model/ops/decode_step_ops.hpp"
#include "model/ops/ops.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace hsring::model {

DFlashDecodeState::DFlashDecodeState(DFlashDrafter& drafter, const TargetHead& head, std::int64_t rows,
                                     std::int64_t capacity, at::Device device, at::ScalarType dtype)
    : config_(drafter->config()), capacity_(capacity), device_(device), dtype_(dtype) {
    if (capacity < 1) fail("DFlash decode state: capacity must be >= 1 context rows, got {}", capacity);
    at::NoGradGuard no_grad;
    auto cast = [&](const at::Tensor& w) { return w.detach().to(device, dtype); };
    embed_ = head.embed.to(device, dtype);
    inv_freq_ = drafter->inv_freq().to(device);
    fc_ = cast(drafter->fc->weight);  // [H, L*H]
    hidden_norm_ = cast(drafter->hidden_norm->weight);
    norm_ = cast(drafter->norm->weight);
    for (const auto& m : *drafter->layers) {
        const auto* l = m->as<DFlashLayerImpl>();
        const auto& a = *l->self_attn;
        layers_.push_back({cast(l->input_layernorm->weight),
                           at::cat({cast(a.q_proj->weight), cast(a.k_proj->weight), cast(a.v_proj->weight)}),
                           cast(a.o_proj->weight), cast(a.q_norm->weight), cast(a.k_norm->weight),
                           cast(l->post_attention_layernorm->weight),
                           at::cat({cast(l->mlp->gate_proj->weight), cast(l->mlp->up_proj->weight)}),
                           cast(l->mlp->down_proj->weight)});
    }
    reset(rows);
}

void DFlashDecodeState::reset(std::int64_t rows) {
    if (rows < 0) fail("DFlash decode state: {} rows", rows);
    lengths_.assign(static_cast<std::size_t>(rows), 0);
    // The same number of rows: the same storage, zeroed (a draft step's CUDA graphs stay valid).
    if (!keys_.empty() && keys_[0].size(0) == rows) {
        for (std::size_t i = 0; i < keys_.size(); ++i) {
            keys_[i].zero_();
            values_[i].zero_();
        }
        return;
    }
    const auto opts = at::TensorOptions().device(device_).dtype(dtype_);
    keys_.clear();
    values_.clear();
    for (std::size_t i = 0; i < layers_.size(); ++i) {
        // Zeros, not empty: positions past a row's length are never attended, but stay finite anyway.
        keys_.push_back(at::zeros({rows, key_capacity(), config_.num_kv_heads, config_.head_dim}, opts));
        values_.push_back(at::zeros({rows, key_capacity(), config_.num_kv_heads, config_.head_dim}, opts));
    }
}

std::int64_t DFlashDecodeState::length(std::int64_t row) const {
    if (row < 0 || row >= rows()) fail("DFlash decode state: row {} of {}", row, rows());
    return lengths_[static_cast<std::size_t>(row)];
}

void DFlashDecodeState::extend(const at::Tensor& captured, const std::vector<std::int64_t>& counts, StepGraphs* graphs) {
    const std::int64_t l = config_.num_context_layers(), h = config_.hidden_size;
    if (captured.dim() != 3 || captured.size(0) != l || captured.size(2) != h)
        fail("DFlash decode state: context rows must be [{} layers, n, {}], got {}", l, h, shape_str(captured.sizes()));
    if (static_cast<std::int64_t>(counts.size()) != rows())
        fail("DFlash decode state: {} counts for {} sequences (one per sequence)", counts.size(), rows());
    std::vector<std::int64_t> positions, slots;
    for (std::int64_t r = 0; r < rows(); ++r) {
        const std::int64_t len = lengths_[static_cast<std::size_t>(r)], n = counts[static_cast<std::size_t>(r)];
        if (n < 0 || len + n > capacity_)
            fail("DFlash decode state: {} context rows do not fit after {} (capacity {})", n, len, capacity_);
        for (std::int64_t i = 0; i < n; ++i) {
            positions.push_back(len + i);
            slots.push_back(r * key_capacity() + len + i);
        }
    }
    const auto n = static_cast<std::int64_t>(positions.size());
    if (captured.size(1) != n)
        fail("DFlash decode state: {} context rows for counts that add up to {}", captured.size(1), n);
    if (n == 0) return;
    at::NoGradGuard no_grad;
    const auto longs = at::TensorOptions().dtype(at::kLong);
    if (graphs && rows() == 1 && n <= config_.block_size) {
        // A verify step's extend of one row in fixed shapes (a graph per count; a prompt's runs op
        // by op): longs = the positions, which are the slots too. Idempotent: it writes the same
        // keys/values again.
        graphs->bind(storage());
        graphs->run({-1, n}, positions, {captured}, [&](const at::Tensor& in, const std::vector<at::Tensor>& t) {
            write_context(t[0], in, in);
            return std::vector<at::Tensor>{};
        });
    } else {
        write_context(captured, at::tensor(positions, longs).to(device_), at::tensor(slots, longs).to(device_));
    }
    for (std::size_t r = 0; r < lengths_.size(); ++r) lengths_[r] += counts[r];
}

void DFlashDecodeState::write_context(const at::Tensor& captured, const at::Tensor& positions, const at::Tensor& slots) {
    const std::int64_t l = config_.num_context_layers(), n = positions.size(0), h = config_.hidden_size;
    // fc over the captured layers side by side: [n, L*H] @ fc^T, one GEMV for up to 16 rows.
    const at::Tensor x = captured.to(dtype_).permute({1, 0, 2}).reshape({n, l * h});
    const at::Tensor fused = rms_norm(dense_rows(x, fc_), hidden_norm_, config_.rms_norm_eps);
    const RopeTables rope = rope_tables(inv_freq_, positions, dtype_, rope_attention_factor(config_.rope_scaling));
    const std::int64_t hq = config_.num_heads, hkv = config_.num_kv_heads, d = config_.head_dim;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
        const Layer& w = layers_[i];
        // k | v: the rows of qkv after q's (a contiguous block of the weight).
        const at::Tensor kv = dense_rows(fused, w.qkv.narrow(0, hq * d, 2 * hkv * d));
        const at::Tensor k = kv.narrow(1, 0, hkv * d).view({n, hkv, d});
        const at::Tensor v = kv.narrow(1, hkv * d, hkv * d).reshape({n, hkv, d});
        keys_[i].view({-1, hkv, d}).index_copy_(0, slots, apply_rope(rms_norm(k, w.k_norm, config_.rms_norm_eps), rope));
        values_[i].view({-1, hkv, d}).index_copy_(0, slots, v);
    }
}

void DFlashDecodeState::crop(std::int64_t row, std::int64_t length) {
    if (length < 0 || length > this->length(row))
        fail("DFlash decode state: cannot crop row {} to {}: it holds {} (crop only shortens)", row, length,
             this->length(row));
    lengths_[static_cast<std::size_t>(row)] = length;
}

void DFlashDecodeState::keep_rows(const std::vector<std::int64_t>& rows) {
    std::vector<std::int64_t> lengths;
    for (std::int64_t r : rows) lengths.push_back(length(r));
    if (rows.size() == lengths_.size()) {
        bool same = true;
        for (std::size_t i = 0; i < rows.size(); ++i) same = same && rows[i] == static_cast<std::int64_t>(i);
        if (same) return;
    }
    const at::Tensor index = at::tensor(rows, at::TensorOptions().dtype(at::kLong)).to(device_);
    for (std::size_t l = 0; l < keys_.size(); ++l) {
        keys_[l] = keys_[l].index_select(0, index);
        values_[l] = values_[l].index_select(0, index);
    }
    lengths_ = std::move(lengths);
}

at::Tensor DFlashDecodeState::draft(const std::vector<std::int64_t>& lasts, const std::vector<std::int64_t>& blocks) const {
    const std::int64_t rs = rows();
    if (static_cast<std::int64_t>(lasts.size()) != rs || static_cast<std::int64_t>(blocks.size()) != rs)
        fail("DFlash decode state: {} tokens and {} block sizes for {} sequences", lasts.size(), blocks.size(), rs);
    if (rs == 0) fail("DFlash decode state: nothing to draft (no sequence)");
    std::int64_t b = 0;
    for (std::int64_t r = 0; r < rs; ++r) {
        const std::int64_t br = blocks[static_cast<std::size_t>(r)];
        if (br < 2 || br > config_.block_size)
            fail("DFlash decode state: a block of {} slots (2..{} allowed)", br, config_.block_size);
        b = std::max(b, br);
    }
    at::NoGradGuard no_grad;
    const std::int64_t t = rs * b;
    // Tokens, positions, and the position each query attends up to (its row's last block slot:
    // the padding of a shorter block lies past it): one copy to the device.
    std::vector<std::int64_t> host(static_cast<std::size_t>(3 * t));
    std::int64_t window = 0;
    for (std::int64_t r = 0; r < rs; ++r) {
        const std::int64_t len = lengths_[static_cast<std::size_t>(r)];
        window = std::max(window, len + b);
        for (std::int64_t j = 0; j < b; ++j) {
            const auto i = static_cast<std::size_t>(r * b + j);
            host[i] = j == 0 ? lasts[static_cast<std::size_t>(r)] : config_.mask_token_id;
            host[static_cast<std::size_t>(t) + i] = len + j;
            host[static_cast<std::size_t>(2 * t) + i] = len + blocks[static_cast<std::size_t>(r)] - 1;
        }
    }
    const at::Tensor ids = at::tensor(host, at::TensorOptions().dtype(at::kLong)).to(device_).view({3, t});
    return block_forward(ids, b, window).view({rs, b, config_.hidden_size});
}

at::Tensor DFlashDecodeState::draft_fixed(const at::Tensor& longs, std::int64_t b, std::int64_t window) const {
    HSRING_ASSERT(rows() == 1 && b >= 2 && b <= config_.block_size && window >= 1 && window <= key_capacity() &&
                      longs.numel() == 3 * b,
                  "DFlash fixed draft: {} rows, block {}, window {}, {} inputs", rows(), b, window, longs.numel());
    at::NoGradGuard no_grad;
    return block_forward(longs.view({3, b}), b, window).view({1, b, config_.hidden_size});
}

at::Tensor DFlashDecodeState::block_forward(const at::Tensor& ids, std::int64_t b, std::int64_t window) const {
    const std::int64_t rs = rows(), t = rs * b, cap = key_capacity();
    const at::Tensor positions = ids[1], attend = ids[2];
    const at::Tensor slot = at::arange(rs, positions.options()).mul(cap).view({rs, 1}).expand({rs, b}).reshape({t}) + positions;
    const RopeTables rope = rope_tables(inv_freq_, positions, dtype_, rope_attention_factor(config_.rope_scaling));
    const CachedHeads heads{config_.num_heads, config_.num_kv_heads, config_.head_dim};
    const double eps = config_.rms_norm_eps, scale = 1.0 / std::sqrt(static_cast<double>(heads.head_dim));
    // The decode engine's step (target_fixed_step.cpp) with the drafter's weights: each residual
    // add runs with the norm after it; the block's keys/values go to the cache's scratch.
    SumAndNorm cur = add_rms_norm(embed_.index_select(0, ids[0]), {}, layers_.front().input_norm, eps);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
        const Layer& w = layers_[i];
        const at::Tensor q = qkv_to_cache(dense_rows(cur.normed, w.qkv), heads, w.q_norm, w.k_norm, eps, rope, slot,
                                          keys_[i], values_[i]);
        const at::Tensor attn = cached_attention(q, keys_[i], values_[i], attend, b, window, scale);
        const SumAndNorm mid =
            add_rms_norm(cur.sum, dense_rows(attn.reshape({t, heads.heads * heads.head_dim}), w.o), w.post_norm, eps);
        const at::Tensor act = swiglu(dense_rows(mid.normed, w.gate_up));
        const bool last = i + 1 == layers_.size();
        cur = add_rms_norm(mid.sum, dense_rows(act, w.down), last ? norm_ : layers_[i + 1].input_norm, eps);
    }
    return cur.normed;
}

DFlashDecodeDrafter::DFlashDecodeDrafter(DFlashDrafter& drafter, const TargetHead& head, std::int64_t rows,
                                         std::int64_t capacity, at::Device device, at::ScalarType dtype,
                                         bool graphs)
    : state_(drafter, head, rows, capacity, device, dtype), ids_(drafter->config().target_layer_ids),
      block_(drafter->config().block_size), lm_head_(head.lm_head), fixed_(graphs),
      graphs_(device, graphs, "the DFlash drafter's draft steps") {}

std::vector<std::int64_t> DFlashDecodeDrafter::draft(const std::vector<std::int64_t>& lasts,
                                                     const std::vector<std::int64_t>& ks, const PickDrafts& pick) {
    if (fixed_ && state_.rows() == 1 && ks.size() == 1 && lasts.size() == 1 && ks[0] >= 2 && ks[0] <= block_) {
        const std::int64_t b = ks[0], len = state_.length(0);
        const std::int64_t window = StepGraphs::window(len + b, state_.key_capacity());
        std::vector<std::int64_t> longs(static_cast<std::size_t>(3 * b));
        for (std::int64_t j = 0; j < b; ++j) {
            longs[static_cast<std::size_t>(j)] = j == 0 ? lasts.at(0) : state_.mask_token_id();
            longs[static_cast<std::size_t>(b + j)] = len + j;
            longs[static_cast<std::size_t>(2 * b + j)] = len + b - 1;
        }
        graphs_.bind(state_.storage());
        // Idempotent: writes the block's keys/values to the cache's scratch and its outputs. Greedy,
        // the drafts are the logits' argmax (the loop's rule) in the graph: one copy to the host.
        const bool greedy = pick.greedy;
        const at::Tensor out = graphs_.run({b, window, greedy}, longs, {}, [&](const at::Tensor& in, const std::vector<at::Tensor>&) {
            const at::Tensor hidden = state_.draft_fixed(in, b, window);  // [1, b, H]
            const at::Tensor logits = dense_rows(hidden[0].narrow(0, 1, b - 1), lm_head_);
            return std::vector<at::Tensor>{greedy ? logits.argmax(-1) : logits};
        })[0];
        if (!greedy) return pick(out, 0, b - 1);
        const at::Tensor drafts = out.to(at::kCPU);
        return {drafts.data_ptr<std::int64_t>(), drafts.data_ptr<std::int64_t>() + drafts.numel()};
    }
    const at::Tensor hidden = state_.draft(lasts, ks);  // [rows, bmax, H]
    const std::int64_t bmax = hidden.size(1);
    const at::Tensor drafted = hidden.narrow(1, 1, bmax - 1).flatten(0, 1).contiguous();
    const std::vector<std::int64_t> all = pick(dense_rows(drafted, lm_head_), 0, bmax - 1);
    std::vector<std::int64_t> out;
    for (std::size_t i = 0; i < ks.size(); ++i)
        for (std::int64_t j = 0; j + 1 < ks[i]; ++j) out.push_back(all[i * static_cast<std::size_t>(bmax - 1) + static_cast<std::size_t>(j)]);
    return out;
}

} // namespace hsring::model
