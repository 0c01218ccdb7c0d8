#include "model/drafter/eagle3/loss.hpp"

#include "hsring/error.hpp"
#include "model/io/safetensors.hpp"
#include "model/ops/ops.hpp"

#include <ATen/ATen.h>

#include <cmath>

namespace hsring::model {

Eagle3BatchRows eagle3_rows(const DrafterBatch& batch, int steps) {
    const std::vector<std::int64_t>& cu = batch.cu_seqlens;
    const at::Device device = batch.hidden.device();
    const std::int64_t T = batch.tokens.size(0);
    // Host index lists: row j of sequence s sits at packed position cu[s] + j.
    std::vector<std::int64_t> src, pos;
    Eagle3BatchRows out;
    out.row_begin.push_back(0);
    for (std::size_t s = 0; s + 1 < cu.size(); ++s) {
        const std::int64_t n = cu[s + 1] - cu[s];
        for (std::int64_t j = 0; j + 1 < n; ++j) {
            src.push_back(cu[s] + j);
            pos.push_back(j + 1);
        }
        out.row_begin.push_back(static_cast<std::int64_t>(src.size()));
    }
    const auto R = static_cast<std::int64_t>(src.size());
    const auto i64 = at::TensorOptions().dtype(at::kLong);
    const at::Tensor src_t = at::tensor(src, i64).to(device), pos_t = at::tensor(pos, i64).to(device);
    out.rows.fused = batch.hidden.narrow(0, 0, 3).index_select(1, src_t);
    out.rows.positions = pos_t;
    // The rows by sequence, without the empty ones (a one-token sequence has no row).
    std::vector<std::int64_t> row_cu{0};
    for (std::size_t s = 1; s < out.row_begin.size(); ++s)
        if (out.row_begin[s] > row_cu.back()) row_cu.push_back(out.row_begin[s]);
    if (row_cu.size() > 1) out.rows.seqs = PackedSequences::make(row_cu, R, device, "EAGLE-3 rows");
    // Each row's last valid packed position: its sequence's end - 1.
    std::vector<std::int64_t> last;
    for (std::size_t s = 0; s + 1 < cu.size(); ++s)
        for (std::int64_t j = 0; j + 1 < cu[s + 1] - cu[s]; ++j) last.push_back(cu[s + 1] - 1);
    const at::Tensor last_t = at::tensor(last, i64).to(device);
    const at::Tensor mask = batch.loss_mask.to(device, at::kFloat);
    for (int k = 0; k < steps; ++k) {
        const at::Tensor tp = src_t + (1 + k);               // the target position of row j at step k
        const at::Tensor valid = tp.le(last_t);
        const at::Tensor clamped = at::minimum(tp, last_t);  // in range; invalid rows are never scored
        out.rows.step_tokens.push_back(at::where(valid, batch.tokens.index_select(0, clamped), at::zeros_like(tp)));
        out.target_positions.push_back(clamped);
        out.masks.push_back(mask.index_select(0, clamped) * valid.to(at::kFloat));
    }
    (void)T;
    return out;
}

void check_eagle3_batch(Eagle3Drafter& drafter, const TargetHead& head, const DrafterBatch& batch) {
    const Eagle3Config& c = drafter->config();
    if (batch.hidden.dim() != 3 || batch.hidden.size(0) != 4 || batch.hidden.size(2) != c.hidden_size)
        fail("EAGLE-3 drafter: hidden states must be [4 captured layers (3 fused + the last), T, {}], got {}",
             c.hidden_size, shape_str(batch.hidden.sizes()));
    if (batch.tokens.size(0) != batch.hidden.size(1) || batch.loss_mask.size(0) != batch.hidden.size(1))
        fail("EAGLE-3 drafter: {} tokens and {} loss mask entries for {} hidden rows", batch.tokens.size(0),
             batch.loss_mask.size(0), batch.hidden.size(1));
    if (batch.cu_seqlens.empty() || batch.cu_seqlens.front() != 0 || batch.cu_seqlens.back() != batch.hidden.size(1))
        fail("EAGLE-3 drafter: cu_seqlens must run from 0 to the batch's {} tokens", batch.hidden.size(1));
    if (!head.norm.defined() || head.embed.size(0) != c.vocab_size || head.embed.size(1) != c.hidden_size)
        fail("EAGLE-3 drafter: the target head must have its final norm and a [{}, {}] embedding",
             c.vocab_size, c.hidden_size);
}

DrafterLoss eagle3_loss(Eagle3Drafter& drafter, const TargetHead& head, const DrafterBatch& batch, int steps,
                        double decay, at::ScalarType dt, Eagle3LossParts* parts) {
    check_eagle3_batch(drafter, head, batch);
    const at::Device device = batch.hidden.device();
    const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
    DrafterLoss r;
    r.loss_sum = at::zeros({}, f32);
    r.weight_sum = at::zeros({}, f32);
    r.correct = at::zeros({steps}, f32);
    r.counted = at::zeros({steps}, f32);
    const Eagle3BatchRows b = eagle3_rows(batch, steps);
    if (parts) parts->row_begin = b.row_begin;
    const std::int64_t R = b.rows.positions.size(0);
    if (R == 0) return r;
    const std::vector<at::Tensor> outs = drafter->forward_steps(b.rows, head.embed, dt);
    const double eps = drafter->config().rms_norm_eps;
    const at::Tensor head_rows = drafter->lm_head.to(dt);  // frozen: one cast for all steps
    // The target's distribution over the draft vocabulary at every packed position [T, Vd] fp32,
    // formed once (as SpecForge does; each step's rows are a shifted selection of it).
    at::Tensor all_target_logp;
    {
        at::NoGradGuard no_grad;
        const at::Tensor last = batch.hidden[3].to(dt);
        all_target_logp = at::log_softmax(dense(rms_norm(last, head.norm, eps), head_rows), -1, at::kFloat);
    }
    for (int k = 0; k < steps; ++k) {
        const at::Tensor target_logp = all_target_logp.index_select(0, b.target_positions[k]);
        const at::Tensor logits = drafter->logits(outs[static_cast<std::size_t>(k)], dt, head_rows);
        const at::Tensor logq = at::log_softmax(logits, -1, at::kFloat);
        // kl_div(log q, p): p (log p - log q), 0 where p = 0.
        const at::Tensor p = target_logp.exp();
        const at::Tensor kl = at::xlogy(p, p).sub(p * logq).sum(-1);  // [R]
        const at::Tensor& m = b.masks[static_cast<std::size_t>(k)];
        const at::Tensor kl_sum = (kl * m).sum();
        r.loss_sum = r.loss_sum + kl_sum * std::pow(decay, k);
        if (k == 0) r.weight_sum = m.sum();
        {
            at::NoGradGuard no_grad;
            const at::Tensor hit = logits.argmax(-1).eq(target_logp.argmax(-1)).to(at::kFloat);
            r.correct[k] = (hit * m).sum();
            r.counted[k] = m.sum();
        }
        if (parts) {
            parts->kl_sum.push_back(kl_sum);
            parts->mask_sum.push_back(m.sum());
            parts->logits.push_back(logits.to(at::kFloat));
        }
    }
    r.units = R;
    return r;
}

} // namespace hsring::model
