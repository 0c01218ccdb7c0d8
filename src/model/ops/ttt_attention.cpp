#include "model/ops/ttt_attention.hpp"

#include "hsring/error.hpp"
#include "model/io/safetensors.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>
#include <limits>

namespace hsring::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// q [R, hq, d] as [R, hkv, rep, d] against a per-row key or value [R, hkv, d]: the grouped heads
// share it without a repeat_interleave copy.
at::Tensor grouped(const at::Tensor& q, std::int64_t hkv) {
    return q.view({q.size(0), hkv, q.size(1) / hkv, q.size(2)});
}

// scale * q_r . k_r per row and head, fp32 [R, hq].
at::Tensor diagonal_scores(const at::Tensor& qf, const at::Tensor& k, double scale) {
    const std::int64_t hkv = k.size(1);
    return (grouped(qf, hkv) * k.to(at::kFloat).unsqueeze(2)).sum(-1).flatten(1) * scale;
}

// p [R, hq] fp32 times a per-row value [R, hkv, d] -> [R, hq, d] fp32.
at::Tensor weighted_row(const at::Tensor& p, const at::Tensor& v) {
    const std::int64_t r = p.size(0), hkv = v.size(1);
    return (p.view({r, hkv, -1, 1}) * v.to(at::kFloat).unsqueeze(2)).flatten(1, 2);
}

// Inputs: [q, k0, v0, k1, v1, ...]. The sequences' offsets are kept in the graph (the caller's
// PackedSequences is gone by the backward).
struct FlashTttFunction : public torch::autograd::Function<FlashTttFunction> {
    static at::Tensor forward(AutogradContext* ctx, at::TensorList in, const PackedSequences* seqs, double scale) {
        const at::Tensor q = in[0].contiguous(), k0 = in[1].contiguous(), v0 = in[2].contiguous();
        const std::int64_t steps = (static_cast<std::int64_t>(in.size()) - 1) / 2;
        auto res = at::_flash_attention_forward(q, k0, v0, seqs->cu_device, seqs->cu_device, seqs->max_len,
                                                seqs->max_len, /*dropout_p=*/0.0, /*is_causal=*/true,
                                                /*return_debug_mask=*/false, scale);
        const at::Tensor& o0 = std::get<0>(res);    // [R, hq, d]
        const at::Tensor lse0 = std::get<1>(res).t();  // [hq, R] -> [R, hq] fp32
        HSRING_ASSERT(lse0.size(0) == q.size(0) && lse0.size(1) == q.size(1),
                      "flash varlen log-sum-exp has shape {}, expected [{}, {}]", shape_str(std::get<1>(res).sizes()),
                      q.size(1), q.size(0));
        const at::Tensor qf = q.to(at::kFloat);
        std::vector<at::Tensor> lses{lse0};
        for (std::int64_t s = 1; s < steps; ++s) lses.push_back(diagonal_scores(qf, in[2 * s + 1], scale));
        // The merged log-sum-exp over step 0's keys and the diagonal ones.
        const at::Tensor lse = at::logsumexp(at::stack(lses), 0);  // [R, hq]
        at::Tensor out = (lse0 - lse).exp().unsqueeze(-1) * o0.to(at::kFloat);
        for (std::int64_t s = 1; s < steps; ++s) out = out + weighted_row((lses[s] - lse).exp(), in[2 * s + 2]);
        out = out.to(q.scalar_type());
        std::vector<at::Tensor> saved{q, k0, v0, out, lse, std::get<2>(res), std::get<3>(res)};
        for (std::int64_t s = 1; s < steps; ++s) {
            saved.push_back(in[2 * s + 1]);
            saved.push_back(in[2 * s + 2]);
        }
        ctx->save_for_backward(saved);
        ctx->saved_data["scale"] = scale;
        ctx->saved_data["cu"] = seqs->cu_device;
        ctx->saved_data["max_len"] = seqs->max_len;
        return out;
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const variable_list s = ctx->get_saved_variables();
        const double scale = ctx->saved_data["scale"].toDouble();
        const at::Tensor cu = ctx->saved_data["cu"].toTensor();
        const std::int64_t max_len = ctx->saved_data["max_len"].toInt();
        const at::Tensor &q = s[0], &k0 = s[1], &v0 = s[2], &out = s[3], &lse = s[4];
        const at::Tensor d_out = grads[0].contiguous();
        // Step 0's keys: flash's backward with the merged output and log-sum-exp is the gradient of
        // the softmax over the union of keys restricted to them.
        auto [dq, dk0, dv0] = at::_flash_attention_backward(d_out, q, k0, v0, out, lse.t().contiguous(), cu, cu,
                                                            max_len, max_len,
                                                            /*dropout_p=*/0.0, /*is_causal=*/true, s[5], s[6], scale);
        variable_list result{dq, dk0, dv0};
        const std::int64_t steps = (static_cast<std::int64_t>(s.size()) - 7) / 2 + 1;
        if (steps > 1) {
            const at::Tensor qf = q.to(at::kFloat), dof = d_out.to(at::kFloat);
            const at::Tensor delta = (dof * out.to(at::kFloat)).sum(-1);  // [R, hq] = rowsum(dO . O)
            at::Tensor dqf = dq.to(at::kFloat);
            const std::int64_t hkv = k0.size(1);
            for (std::int64_t i = 1; i < steps; ++i) {
                const at::Tensor &k = s[7 + 2 * (i - 1)], &v = s[8 + 2 * (i - 1)];
                const at::Tensor p = (diagonal_scores(qf, k, scale) - lse).exp();      // [R, hq]
                const at::Tensor dp = (grouped(dof, hkv) * v.to(at::kFloat).unsqueeze(2)).sum(-1).flatten(1);
                const at::Tensor ds = p * (dp - delta);                                    // [R, hq]
                dqf = dqf + weighted_row(ds * scale, k);
                const std::int64_t r = q.size(0);
                const at::Tensor dk = (ds.view({r, hkv, -1, 1}) * grouped(qf, hkv)).sum(2) * scale;
                const at::Tensor dv = (p.view({r, hkv, -1, 1}) * grouped(dof, hkv)).sum(2);
                result.push_back(dk.to(k.scalar_type()));
                result.push_back(dv.to(v.scalar_type()));
            }
            result[0] = dqf.to(q.scalar_type());
        }
        result.push_back({});  // seqs
        result.push_back({});  // scale
        return result;
    }
};

void check_steps(const at::Tensor& q, const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& values) {
    HSRING_ASSERT(!keys.empty() && keys.size() == values.size(), "ttt attention: {} keys and {} values", keys.size(),
                  values.size());
    for (std::size_t s = 0; s < keys.size(); ++s)
        HSRING_ASSERT(keys[s].dim() == 3 && keys[s].size(0) == q.size(0) && keys[s].sizes() == values[s].sizes() &&
                          q.size(1) % keys[s].size(1) == 0 && keys[s].size(2) == q.size(2),
                      "ttt attention: step {}'s keys {} / values {} do not fit queries {}", s,
                      shape_str(keys[s].sizes()), shape_str(values[s].sizes()), shape_str(q.sizes()));
}

} // namespace

at::Tensor packed_causal_mask(const PackedSequences& seqs, at::Device device) {
    std::vector<std::int64_t> seq(static_cast<std::size_t>(seqs.total()));
    for (std::int64_t s = 0; s < seqs.count(); ++s)
        for (std::int64_t t = seqs.cu[s]; t < seqs.cu[s + 1]; ++t) seq[static_cast<std::size_t>(t)] = s;
    const at::Tensor id = at::tensor(seq, at::TensorOptions().dtype(at::kLong)).to(device);
    const at::Tensor idx = at::arange(seqs.total(), at::TensorOptions().dtype(at::kLong).device(device));
    return id.unsqueeze(1).eq(id.unsqueeze(0)).logical_and(idx.unsqueeze(1).ge(idx.unsqueeze(0)));
}

bool ttt_attention_flash(const at::Tensor& q, const PackedSequences& seqs) {
    const auto d = q.size(-1);
    return q.is_cuda() && (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf) && d % 8 == 0 &&
           d <= 256 && seqs.cu_device.defined() && seqs.total() == q.size(0);
}

at::Tensor ttt_attention_eager(const at::Tensor& q, const std::vector<at::Tensor>& keys,
                               const std::vector<at::Tensor>& values, const at::Tensor& causal, double scale) {
    check_steps(q, keys, values);
    const std::int64_t rows = q.size(0), hq = q.size(1), hkv = keys[0].size(1);
    const std::int64_t rep = hq / hkv;
    auto heads = [rep](const at::Tensor& t) { return rep == 1 ? t : t.repeat_interleave(rep, /*dim=*/1); };
    const at::Tensor qh = q.transpose(0, 1);                                           // [hq, R, d]
    at::Tensor scores0 = at::matmul(qh, heads(keys[0]).permute({1, 2, 0})) * scale;  // [hq, R, R]
    scores0 = scores0.masked_fill(causal.logical_not().unsqueeze(0), -std::numeric_limits<double>::infinity());
    std::vector<at::Tensor> cols{scores0};
    for (std::size_t s = 1; s < keys.size(); ++s)  // [hq, R, 1]: the row's own key of step s
        cols.push_back(((q * heads(keys[s])).sum(-1) * scale).transpose(0, 1).unsqueeze(-1));
    const at::Tensor p = at::softmax(at::cat(cols, -1), -1, at::kFloat).to(q.scalar_type());
    at::Tensor out = at::matmul(p.narrow(-1, 0, rows), heads(values[0]).transpose(0, 1));  // [hq, R, d]
    for (std::size_t s = 1; s < keys.size(); ++s)
        out = out + p.narrow(-1, rows + static_cast<std::int64_t>(s) - 1, 1) * heads(values[s]).transpose(0, 1);
    return out.transpose(0, 1);  // [R, hq, d]
}

at::Tensor ttt_attention(const at::Tensor& q, const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& values,
                         const PackedSequences& seqs, const at::Tensor& causal, double scale) {
    if (ttt_attention_flash(q, seqs)) {
        check_steps(q, keys, values);
        std::vector<at::Tensor> in{q};
        for (std::size_t s = 0; s < keys.size(); ++s) {
            in.push_back(keys[s]);
            in.push_back(values[s]);
        }
        return FlashTttFunction::apply(at::TensorList(in), &seqs, scale);
    }
    return ttt_attention_eager(q, keys, values, causal.defined() ? causal : packed_causal_mask(seqs, q.device()),
                               scale);
}

} // namespace hsring::model
