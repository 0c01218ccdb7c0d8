#include "model/drafter/eagle3/decode.hpp"

#include "hsring/error.hpp"
#include "model/ops/fused_swiglu.hpp"
#include "model/ops/ops.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace hsring::model {

Eagle3DecodeDrafter::Eagle3DecodeDrafter(Eagle3Drafter& drafter, const TargetHead& head, std::int64_t rows,
                                         std::int64_t capacity, at::Device device, at::ScalarType dtype,
                                         std::int64_t draft_tokens, bool graphs)
    : config_(drafter->config()), ids_(config_.aux_layer_ids), draft_tokens_(draft_tokens), capacity_(capacity),
      device_(device), dtype_(dtype), fixed_(graphs), graphs_(device, graphs, "the EAGLE-3 drafter's chain steps") {
    if (draft_tokens_ < 1) fail("EAGLE-3 decoding: at least one draft token per step, got {}", draft_tokens_);
    if (capacity_ < 1) fail("EAGLE-3 decoding: capacity must be >= 1 positions, got {}", capacity_);
    HSRING_ASSERT(ids_.size() == 3, "EAGLE-3 decoding: {} fused layers", ids_.size());
    HSRING_ASSERT(drafter->lm_head.defined(), "EAGLE-3 decoding: the drafter's LM head rows were never set");
    at::NoGradGuard no_grad;
    auto cast = [&](const at::Tensor& t) { return t.detach().to(device, dtype); };
    embed_ = cast(head.embed);
    inv_freq_ = drafter->inv_freq().to(device);
    fc_ = cast(drafter->fc->weight);
    const Eagle3LayerImpl& l = *drafter->midlayer;
    input_norm_ = cast(l.input_layernorm->weight);
    hidden_norm_ = cast(l.hidden_norm->weight);
    post_norm_ = cast(l.post_attention_layernorm->weight);
    q_ = cast(l.self_attn->q_proj->weight);
    k_ = cast(l.self_attn->k_proj->weight);
    v_ = cast(l.self_attn->v_proj->weight);
    o_ = cast(l.self_attn->o_proj->weight);
    gate_ = cast(l.mlp->gate_proj->weight);
    up_ = cast(l.mlp->up_proj->weight);
    down_ = cast(l.mlp->down_proj->weight);
    norm_ = cast(drafter->norm->weight);
    lm_head_ = cast(drafter->lm_head);
    draft_ids_ = drafter->draft_ids().to(device);
    const auto o = at::TensorOptions().dtype(dtype_).device(device_);
    chain_h_ = at::zeros({draft_tokens_, 1, config_.hidden_size}, o);
    chain_k_ = at::zeros({draft_tokens_, 1, config_.num_kv_heads, config_.head_dim}, o);
    chain_v_ = at::zeros_like(chain_k_);
    reset(rows);
}

void Eagle3DecodeDrafter::reset(std::int64_t rows) {
    if (rows < 0) fail("EAGLE-3 decoding: {} rows", rows);
    lengths_.assign(static_cast<std::size_t>(rows), 0);
    // Zeros, not empty: positions past a row's length are masked, but stay finite anyway. The same
    // number of rows keeps the storage (the chain steps' CUDA graphs stay valid).
    if (keys_.defined() && keys_.size(0) == rows) {
        keys_.zero_();
        values_.zero_();
        last_out_.zero_();
        return;
    }
    const auto o = at::TensorOptions().dtype(dtype_).device(device_);
    keys_ = at::zeros({rows, capacity_, config_.num_kv_heads, config_.head_dim}, o);
    values_ = at::zeros_like(keys_);
    last_out_ = at::zeros({rows, config_.hidden_size}, o);
}

Eagle3DecodeDrafter::Qkv Eagle3DecodeDrafter::project(const at::Tensor& emb, const at::Tensor& hidden,
                                                      const at::Tensor& positions) const {
    const double eps = config_.rms_norm_eps;
    const std::int64_t n = hidden.size(0), hq = config_.num_heads, hkv = config_.num_kv_heads, d = config_.head_dim;
    const at::Tensor x = at::cat({rms_norm(emb, input_norm_, eps), rms_norm(hidden, hidden_norm_, eps)}, -1);
    const RopeTables rope = rope_tables(inv_freq_, positions, dtype_, rope_attention_factor(config_.rope_scaling));
    return {apply_rope(dense(x, q_).view({n, hq, d}), rope), apply_rope(dense(x, k_).view({n, hkv, d}), rope),
            dense(x, v_).view({n, hkv, d})};
}

at::Tensor Eagle3DecodeDrafter::finish(const at::Tensor& hidden, const at::Tensor& o) const {
    const at::Tensor y = hidden + dense(o.reshape({o.size(0), -1}), o_);
    const at::Tensor m = rms_norm(y, post_norm_, config_.rms_norm_eps);
    return y + dense(fused_swiglu(dense(m, gate_), dense(m, up_)), down_);
}

at::Tensor Eagle3DecodeDrafter::attend(const at::Tensor& q, const at::Tensor& rows, std::int64_t window,
                                       const at::Tensor& len, const std::vector<at::Tensor>& chain_k,
                                       const std::vector<at::Tensor>& chain_v) const {
    const std::int64_t rep = config_.num_heads / config_.num_kv_heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(config_.head_dim));
    auto heads = [rep](const at::Tensor& t, int dim) { return rep == 1 ? t : t.repeat_interleave(rep, dim); };
    const std::int64_t lmax = window;  // keys past each row's len[i] are masked
    HSRING_ASSERT(lmax >= 1 && lmax <= capacity_, "EAGLE-3 decoding: attention over {} cached positions", lmax);
    const at::Tensor keys = keys_.index_select(0, rows).narrow(1, 0, lmax),
                     values = values_.index_select(0, rows).narrow(1, 0, lmax);  // [n, L, hkv, d]
    at::Tensor scores = at::einsum("nhd,nlhd->nhl", {q, heads(keys, 2)}) * scale;  // [n, hq, L]
    const at::Tensor pad = at::arange(lmax, len.options()).unsqueeze(0).ge(len.unsqueeze(1));  // [n, L]
    scores = scores.masked_fill(pad.unsqueeze(1), -std::numeric_limits<double>::infinity());
    std::vector<at::Tensor> cols{scores};
    for (const auto& ck : chain_k) cols.push_back(((q * heads(ck, 1)).sum(-1) * scale).unsqueeze(-1));  // [n, hq, 1]
    // Softmax in fp32, as the training forward's eager attention.
    const at::Tensor p = at::softmax(at::cat(cols, -1), -1, at::kFloat).to(dtype_);
    at::Tensor out = at::einsum("nhl,nlhd->nhd", {p.narrow(-1, 0, lmax), heads(values, 2)});
    for (std::size_t s = 0; s < chain_v.size(); ++s)
        out = out + p.narrow(-1, lmax + static_cast<std::int64_t>(s), 1) * heads(chain_v[s], 1);
    return out;  // [n, hq, d]
}

void Eagle3DecodeDrafter::extend(const at::Tensor& captured, const std::vector<std::int64_t>& counts,
                                 const std::vector<std::int64_t>& next_tokens) {
    const std::int64_t h = config_.hidden_size;
    HSRING_ASSERT(counts.size() == lengths_.size(), "EAGLE-3 extend: {} counts for {} rows", counts.size(),
                  lengths_.size());
    HSRING_ASSERT(captured.dim() == 3 && captured.size(0) == 3 && captured.size(2) == h &&
                      static_cast<std::int64_t>(next_tokens.size()) == captured.size(1),
                  "EAGLE-3 extend: captured {} for {} next tokens", shape_str(captured.sizes()), next_tokens.size());
    std::int64_t total = 0;
    for (std::int64_t c : counts) total += c;
    HSRING_ASSERT(total == captured.size(1), "EAGLE-3 extend: counts add up to {}, captured {} positions", total,
                  captured.size(1));
    if (total == 0) return;
    at::NoGradGuard no_grad;
    // Position j of a row: the fused layers at j with the embedding of token j + 1, RoPE at j + 1
    // (training's row j at step 0); its key/value goes to cache slot j.
    std::vector<std::int64_t> rope_pos, row_of, slot, last_index, extended, lengths;
    for (std::size_t r = 0, off = 0; r < counts.size(); off += static_cast<std::size_t>(counts[r]), ++r) {
        if (lengths_[r] + counts[r] > capacity_)
            fail("EAGLE-3 decoding: row {} would hold {} positions, room for {}", r, lengths_[r] + counts[r], capacity_);
        for (std::int64_t j = 0; j < counts[r]; ++j) {
            rope_pos.push_back(lengths_[r] + j + 1);
            row_of.push_back(static_cast<std::int64_t>(r));
            slot.push_back(lengths_[r] + j);
        }
        if (counts[r] > 0) {
            last_index.push_back(static_cast<std::int64_t>(off) + counts[r] - 1);
            extended.push_back(static_cast<std::int64_t>(r));
            lengths.push_back(lengths_[r] + counts[r]);
        }
    }
    const auto i64 = at::TensorOptions().dtype(at::kLong);
    auto on_device = [&](const std::vector<std::int64_t>& v) { return at::tensor(v, i64).to(device_); };
    const std::int64_t window = *std::max_element(lengths.begin(), lengths.end());
    if (fixed_ && lengths_.size() == 1 && total <= max_block()) {
        // A verify step's extend of one row in fixed shapes (a graph per count and window; a
        // prompt's runs op by op): longs = next tokens, RoPE positions, slots, the new length.
        // Idempotent: it writes the same keys/values and last_out_ from its inputs alone.
        const std::int64_t n = total, len = lengths[0], w = StepGraphs::window(len, capacity_);
        std::vector<std::int64_t> longs = next_tokens;
        longs.insert(longs.end(), rope_pos.begin(), rope_pos.end());
        longs.insert(longs.end(), slot.begin(), slot.end());
        longs.push_back(len);
        graphs_.bind(keys_.data_ptr());
        graphs_.run({-1, n, w, StepGraphs::address(last_out_)}, longs, {captured}, [&](const at::Tensor& in, const std::vector<at::Tensor>& t) {
            const at::Tensor row0 = at::zeros({n}, in.options());
            write_rows(t[0], in.narrow(0, 0, n), in.narrow(0, n, n), row0, in.narrow(0, 2 * n, n),
                       at::full({1}, n - 1, in.options()), row0.narrow(0, 0, 1), w, in.narrow(0, 3 * n, 1));
            return std::vector<at::Tensor>{};
        });
    } else {
        write_rows(captured, on_device(next_tokens), on_device(rope_pos), on_device(row_of), on_device(slot),
                   on_device(last_index), on_device(extended), window, on_device(lengths));
    }
    for (std::size_t r = 0; r < counts.size(); ++r) lengths_[r] += counts[r];
}

void Eagle3DecodeDrafter::write_rows(const at::Tensor& captured, const at::Tensor& next, const at::Tensor& rope_pos,
                                     const at::Tensor& rows, const at::Tensor& slots, const at::Tensor& last_index,
                                     const at::Tensor& extended, std::int64_t window, const at::Tensor& lengths) {
    const std::int64_t h = config_.hidden_size;
    // fc over the concatenated layers as a sum of per-layer products (no [T, 3H] copy), as in training.
    const at::Tensor x = captured.to(dtype_);
    at::Tensor fused = at::matmul(x[0], fc_.narrow(1, 0, h).t());
    for (std::int64_t i = 1; i < 3; ++i) fused = at::addmm(fused, x[i], fc_.narrow(1, i * h, h).t());
    const Qkv p = project(at::embedding(embed_, next), fused, rope_pos);
    keys_.index_put_({rows, slots}, p.k);
    values_.index_put_({rows, slots}, p.v);
    // The last new position of each extended row attends its row's cached positions (itself included).
    const at::Tensor o = attend(p.q.index_select(0, last_index), extended, window, lengths, {}, {});
    last_out_.index_copy_(0, extended, finish(fused.index_select(0, last_index), o));
}

void Eagle3DecodeDrafter::keep_rows(const std::vector<std::int64_t>& rows) {
    const at::Tensor idx = at::tensor(rows, at::TensorOptions().dtype(at::kLong)).to(device_);
    keys_ = keys_.index_select(0, idx);
    values_ = values_.index_select(0, idx);
    last_out_ = last_out_.index_select(0, idx);
    std::vector<std::int64_t> lengths;
    for (std::int64_t r : rows) lengths.push_back(lengths_.at(static_cast<std::size_t>(r)));
    lengths_ = std::move(lengths);
}

std::vector<std::int64_t> Eagle3DecodeDrafter::draft(const std::vector<std::int64_t>&,
                                                     const std::vector<std::int64_t>& ks, const PickDrafts& pick) {
    const auto rows = static_cast<std::int64_t>(ks.size());
    HSRING_ASSERT(rows == static_cast<std::int64_t>(lengths_.size()), "EAGLE-3 draft: {} rows, state of {}", rows,
                  lengths_.size());
    for (std::size_t r = 0; r < ks.size(); ++r) {
        HSRING_ASSERT(ks[r] >= 1 && ks[r] <= max_block(), "EAGLE-3 draft: row {} block {}, 1..{} allowed", r, ks[r],
                      max_block());
        HSRING_ASSERT(lengths_[r] >= 1, "EAGLE-3 draft: row {} has no verified position", r);
    }
    const std::int64_t steps = rows == 0 ? 0 : *std::max_element(ks.begin(), ks.end()) - 1;
    if (steps == 0) return {};
    if (fixed_ && rows == 1) return draft_fixed(steps, pick);
    at::NoGradGuard no_grad;
    const auto i64 = at::TensorOptions().dtype(at::kLong);
    const at::Tensor all_rows = at::arange(rows, i64.device(device_));
    // Draft s + 1 is the token at position length(r) + s + 1 (length(r): the last accepted token's);
    // the chain embeds it at RoPE position length(r) + s + 1, as training's step s + 1 of the last
    // cached position (RoPE length(r) at step 0).
    const at::Tensor base = at::tensor(lengths_, i64).to(device_);
    const std::int64_t window = *std::max_element(lengths_.begin(), lengths_.end());
    std::vector<std::vector<std::int64_t>> drafts(static_cast<std::size_t>(rows));
    at::Tensor h = last_out_;
    std::vector<at::Tensor> chain_k, chain_v;
    for (std::int64_t s = 0; s < steps; ++s) {
        const std::vector<std::int64_t> toks = pick(draft_logits(h), s, 1);
        for (std::int64_t r = 0; r < rows; ++r) drafts[static_cast<std::size_t>(r)].push_back(toks[static_cast<std::size_t>(r)]);
        if (s + 1 == steps) break;
        const Qkv p = project(at::embedding(embed_, at::tensor(toks, i64).to(device_)), h, base + (s + 1));
        chain_k.push_back(p.k);
        chain_v.push_back(p.v);
        h = finish(h, attend(p.q, all_rows, window, base, chain_k, chain_v));
    }
    std::vector<std::int64_t> out;
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j + 1 < ks[static_cast<std::size_t>(r)]; ++j)
            out.push_back(drafts[static_cast<std::size_t>(r)][static_cast<std::size_t>(j)]);
    return out;
}

at::Tensor Eagle3DecodeDrafter::draft_logits(const at::Tensor& h) const {
    const at::Tensor logits = dense(rms_norm(h, norm_, config_.rms_norm_eps), lm_head_).to(at::kFloat);  // [R, Vd]
    at::Tensor full = at::full({h.size(0), config_.vocab_size}, -std::numeric_limits<float>::infinity(), logits.options());
    return full.index_copy_(1, draft_ids_, logits);
}

at::Tensor Eagle3DecodeDrafter::chain_first() {
    chain_h_[0].copy_(last_out_.narrow(0, 0, 1));
    return draft_logits(chain_h_[0]);
}

at::Tensor Eagle3DecodeDrafter::chain_step(std::int64_t s, const at::Tensor& token, const at::Tensor& len,
                                           std::int64_t window) {
    const at::Tensor h = chain_h_[s - 1];
    const Qkv p = project(at::embedding(embed_, token), h, len + s);
    chain_k_[s - 1].copy_(p.k);
    chain_v_[s - 1].copy_(p.v);
    std::vector<at::Tensor> ck, cv;
    for (std::int64_t j = 0; j < s; ++j) {
        ck.push_back(chain_k_[j]);
        cv.push_back(chain_v_[j]);
    }
    const at::Tensor o = attend(p.q, at::zeros({1}, len.options()), window, len, ck, cv);
    chain_h_[s].copy_(finish(h, o));
    return draft_logits(chain_h_[s]);
}

std::vector<std::int64_t> Eagle3DecodeDrafter::draft_fixed(std::int64_t steps, const PickDrafts& pick) {
    // One row in fixed shapes: step 0 takes the last cached position's output into chain_h_[0];
    // step s embeds draft s at RoPE position length + s with chain_h_[s - 1], writes its key/value
    // to chain slot s - 1, attends the window's cached positions (those past the length masked)
    // and chain slots 0..s - 1, and writes chain_h_[s]. Each step reads one slot and writes the
    // next: idempotent, as a graph's warm-up needs.
    at::NoGradGuard no_grad;
    const std::int64_t len = lengths_[0], window = StepGraphs::window(len, capacity_);
    graphs_.bind(keys_.data_ptr());
    const std::int64_t last_out = StepGraphs::address(last_out_);
    if (pick.greedy) {
        // The whole chain as one graph: each draft is the argmax of its logits (the loop's greedy
        // rule) on the device and feeds the next step, so a verify step waits for the host once.
        const at::Tensor drafts =
            graphs_.run({-2, steps, window, last_out}, {len}, {}, [&](const at::Tensor& in, const std::vector<at::Tensor>&) {
                const at::Tensor n = in.narrow(0, 0, 1);
                std::vector<at::Tensor> toks{chain_first().argmax(-1)};
                for (std::int64_t s = 1; s < steps; ++s) toks.push_back(chain_step(s, toks.back(), n, window).argmax(-1));
                return std::vector<at::Tensor>{at::cat(toks)};
            })[0].to(at::kCPU);
        return {drafts.data_ptr<std::int64_t>(), drafts.data_ptr<std::int64_t>() + drafts.numel()};
    }
    // Sampled: one graph per step, the loop's pick on the host between them.
    std::vector<std::int64_t> drafts;
    for (std::int64_t s = 0; s < steps; ++s) {
        const at::Tensor logits =
            s == 0 ? graphs_.run({0, 0, last_out}, {}, {}, [&](const at::Tensor&, const std::vector<at::Tensor>&) {
                return std::vector<at::Tensor>{chain_first()};
            })[0]
                   : graphs_.run({s, window, last_out}, {drafts.back(), len}, {},
                                 [&](const at::Tensor& in, const std::vector<at::Tensor>&) {
                return std::vector<at::Tensor>{chain_step(s, in.narrow(0, 0, 1), in.narrow(0, 1, 1), window)};
            })[0];
        drafts.push_back(pick(logits, s, 1).at(0));
    }
    return drafts;
}

} // namespace hsring::model
