#include "model/drafter/dflash/decode.hpp"

#include "hsring/error.hpp"
#include "model/ops/attention.hpp"
#include "model/ops/ops.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace hsring::model {

DFlashDecodeState::DFlashDecodeState(DFlashDrafter& drafter, const TargetHead& head, std::int64_t rows,
                                     std::int64_t capacity, at::Device device, at::ScalarType dtype)
    : config_(drafter->config()), capacity_(capacity), device_(device), dtype_(dtype) {
    if (capacity < 1) fail("DFlash decode state: capacity must be >= 1 context rows, got {}", capacity);
    at::NoGradGuard no_grad;
    auto cast = [&](const at::Tensor& w) { return w.detach().to(device, dtype); };
    const std::int64_t h = config_.hidden_size;
    embed_ = head.embed.to(device, dtype);
    inv_freq_ = drafter->inv_freq().to(device);
    const at::Tensor fc = cast(drafter->fc->weight);  // [H, L*H]
    for (std::int64_t i = 0; i < config_.num_context_layers(); ++i) fc_.push_back(fc.narrow(1, i * h, h).contiguous());
    hidden_norm_ = cast(drafter->hidden_norm->weight);
    norm_ = cast(drafter->norm->weight);
    for (const auto& m : *drafter->layers) {
        const auto* l = m->as<DFlashLayerImpl>();
        const auto& a = *l->self_attn;
        layers_.push_back({cast(l->input_layernorm->weight), cast(a.q_proj->weight), cast(a.k_proj->weight),
                           cast(a.v_proj->weight), cast(a.o_proj->weight), cast(a.q_norm->weight),
                           cast(a.k_norm->weight), cast(l->post_attention_layernorm->weight),
                           cast(l->mlp->gate_proj->weight), cast(l->mlp->up_proj->weight),
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
        keys_.push_back(at::zeros({rows, capacity_, config_.num_kv_heads, config_.head_dim}, opts));
        values_.push_back(at::zeros({rows, capacity_, config_.num_kv_heads, config_.head_dim}, opts));
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
            slots.push_back(r * capacity_ + len + i);
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
    const std::int64_t l = config_.num_context_layers(), n = positions.size(0);
    const at::Tensor x = captured.to(dtype_);
    at::Tensor fused = at::matmul(x[0], fc_[0].t());
    for (std::int64_t i = 1; i < l; ++i) fused = at::addmm(fused, x[i], fc_[static_cast<std::size_t>(i)].t());
    fused = rms_norm(fused, hidden_norm_, config_.rms_norm_eps);
    const RopeTables rope = rope_tables(inv_freq_, positions, dtype_, rope_attention_factor(config_.rope_scaling));
    const std::int64_t hkv = config_.num_kv_heads, d = config_.head_dim;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
        const Layer& w = layers_[i];
        keys_[i].view({-1, hkv, d}).index_copy_(
            0, slots, apply_rope(rms_norm(at::linear(fused, w.k).view({n, hkv, d}), w.k_norm, config_.rms_norm_eps), rope));
        values_[i].view({-1, hkv, d}).index_copy_(0, slots, at::linear(fused, w.v).view({n, hkv, d}));
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
    std::int64_t b = 0, longest = 0;
    bool ragged = false;
    for (std::int64_t r = 0; r < rs; ++r) {
        const std::int64_t br = blocks[static_cast<std::size_t>(r)];
        if (br < 2 || br > config_.block_size)
            fail("DFlash decode state: a block of {} slots (2..{} allowed)", br, config_.block_size);
        ragged = ragged || br != blocks[0] || lengths_[static_cast<std::size_t>(r)] != lengths_[0];
        b = std::max(b, br);
        longest = std::max(longest, lengths_[static_cast<std::size_t>(r)]);
    }
    at::NoGradGuard no_grad;
    const auto host_longs = at::TensorOptions().dtype(at::kLong);
    const std::int64_t t = rs * b, keys = longest + b;
    // Tokens then positions, one copy to the device.
    std::vector<std::int64_t> host(static_cast<std::size_t>(2 * t));
    for (std::int64_t r = 0; r < rs; ++r)
        for (std::int64_t j = 0; j < b; ++j) {
            host[static_cast<std::size_t>(r * b + j)] = j == 0 ? lasts[static_cast<std::size_t>(r)] : config_.mask_token_id;
            host[static_cast<std::size_t>(t + r * b + j)] = lengths_[static_cast<std::size_t>(r)] + j;
        }
    // Keys of row r: its context padded to the longest, then its block padded to b; the mask
    // (true = attended) hides both paddings. [rows, 1, 1, keys] broadcasts over heads and queries.
    std::optional<at::Tensor> mask;
    if (ragged) {
        std::vector<std::uint8_t> m(static_cast<std::size_t>(rs * keys), 0);
        for (std::int64_t r = 0; r < rs; ++r)
            for (std::int64_t j = 0; j < keys; ++j)
                m[static_cast<std::size_t>(r * keys + j)] =
                    j < lengths_[static_cast<std::size_t>(r)] || (j >= longest && j - longest < blocks[static_cast<std::size_t>(r)]);
        mask = at::tensor(at::ArrayRef<std::uint8_t>(m), at::TensorOptions().dtype(at::kByte))
                   .to(at::kBool).view({rs, 1, 1, keys}).to(device_);
    }
    return block_forward(at::tensor(host, host_longs).to(device_).view({2, t}), b, longest, mask);
}

at::Tensor DFlashDecodeState::draft_fixed(const at::Tensor& longs, std::int64_t b, std::int64_t window) const {
    HSRING_ASSERT(rows() == 1 && b >= 2 && b <= config_.block_size && window >= 1 && window <= capacity_ &&
                      longs.numel() == 2 * b + 1,
                  "DFlash fixed draft: {} rows, block {}, window {}, {} inputs", rows(), b, window, longs.numel());
    at::NoGradGuard no_grad;
    // Key j of the window is attended while j < the row's length (from the device: one graph
    // serves every length in its window); the block's own keys always.
    const at::Tensor length = longs.narrow(0, 2 * b, 1);
    const at::Tensor mask = at::cat({at::arange(window, longs.options()).lt(length),
                                     at::ones({b}, longs.options().dtype(at::kBool))})
                                .view({1, 1, 1, window + b});
    return block_forward(longs.narrow(0, 0, 2 * b).view({2, b}), b, window, mask);
}

at::Tensor DFlashDecodeState::block_forward(const at::Tensor& ids, std::int64_t b, std::int64_t window,
                                            const std::optional<at::Tensor>& mask) const {
    const std::int64_t rs = rows(), t = rs * b;
    const RopeTables rope = rope_tables(inv_freq_, ids[1], dtype_, rope_attention_factor(config_.rope_scaling));
    const std::int64_t hq = config_.num_heads, hkv = config_.num_kv_heads, d = config_.head_dim;
    const double eps = config_.rms_norm_eps, scale = 1.0 / std::sqrt(static_cast<double>(d));
    const std::int64_t rep = hq / hkv;
    // The memory-efficient kernel: no per-shape plan, and the context grows every step.
    SdpaBackendScope backend(AttentionKernel::Efficient, embed_.is_cuda());
    at::Tensor x = embed_.index_select(0, ids[0]);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
        const Layer& w = layers_[i];
        const at::Tensor hn = rms_norm(x, w.input_norm, eps);
        const at::Tensor q = apply_rope(rms_norm(at::linear(hn, w.q).view({t, hq, d}), w.q_norm, eps), rope);
        const at::Tensor k_blk = apply_rope(rms_norm(at::linear(hn, w.k).view({t, hkv, d}), w.k_norm, eps), rope);
        const at::Tensor v_blk = at::linear(hn, w.v).view({t, hkv, d});
        // Keys [rows, Hkv, window + b, D]: every block row sees its sequence's context rows and its
        // whole block (non-causal). GQA without repeating K/V: the r query heads of one kv head
        // become r x b query rows, as block_attention does.
        const at::Tensor k =
            at::cat({keys_[i].narrow(1, 0, window), k_blk.view({rs, b, hkv, d})}, 1).transpose(1, 2);
        const at::Tensor v =
            at::cat({values_[i].narrow(1, 0, window), v_blk.view({rs, b, hkv, d})}, 1).transpose(1, 2);
        const at::Tensor qg = q.view({rs, b, hkv, rep, d}).permute({0, 2, 3, 1, 4}).reshape({rs, hkv, rep * b, d});
        at::Tensor o = at::scaled_dot_product_attention(qg, k, v, mask, 0.0, /*is_causal=*/false, scale);
        o = o.view({rs, hkv, rep, b, d}).permute({0, 3, 1, 2, 4}).reshape({t, hq * d});
        x = x + at::linear(o, w.o);
        const at::Tensor m = rms_norm(x, w.post_norm, eps);
        x = x + at::linear(at::silu(at::linear(m, w.gate)) * at::linear(m, w.up), w.down);
    }
    return rms_norm(x, norm_, eps).view({rs, b, config_.hidden_size});
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
        const std::int64_t window = StepGraphs::window(len, state_.capacity());
        std::vector<std::int64_t> longs(static_cast<std::size_t>(2 * b + 1));
        for (std::int64_t j = 0; j < b; ++j) {
            longs[static_cast<std::size_t>(j)] = j == 0 ? lasts.at(0) : state_.mask_token_id();
            longs[static_cast<std::size_t>(b + j)] = len + j;
        }
        longs.back() = len;
        graphs_.bind(state_.storage());
        // Idempotent: reads the cache, writes only its outputs.
        const at::Tensor logits = graphs_.run({b, window}, longs, {}, [&](const at::Tensor& in, const std::vector<at::Tensor>&) {
            const at::Tensor hidden = state_.draft_fixed(in, b, window);  // [1, b, H]
            return std::vector<at::Tensor>{at::matmul(hidden[0].narrow(0, 1, b - 1), lm_head_.t())};
        })[0];
        return pick(logits, 0, b - 1);
    }
    const at::Tensor hidden = state_.draft(lasts, ks);  // [rows, bmax, H]
    const std::int64_t bmax = hidden.size(1);
    const std::vector<std::int64_t> all = pick(at::matmul(hidden.narrow(1, 1, bmax - 1), lm_head_.t()).flatten(0, 1), 0, bmax - 1);
    std::vector<std::int64_t> out;
    for (std::size_t i = 0; i < ks.size(); ++i)
        for (std::int64_t j = 0; j + 1 < ks[i]; ++j) out.push_back(all[i * static_cast<std::size_t>(bmax - 1) + static_cast<std::size_t>(j)]);
    return out;
}

} // namespace hsring::model
