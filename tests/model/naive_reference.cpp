#include "naive_reference.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>

namespace hsring::test {
namespace {

at::Tensor rms(const at::Tensor& x, const at::Tensor& w, double eps) {
    return x / at::sqrt(x.pow(2).mean({-1}, true) + eps) * w;
}

// theta_i = base^(-2i/d), Llama-3 scaling applied per frequency from its definition.
std::vector<double> frequencies(const ModelShape& s) {
    std::vector<double> f;
    const auto d = s.head_dim;
    for (std::int64_t i = 0; i < d / 2; ++i) {
        double inv = 1.0 / std::pow(s.rope_theta, 2.0 * static_cast<double>(i) / static_cast<double>(d));
        const auto& rs = s.rope_scaling;
        if (rs.type == "linear") inv /= rs.factor;
        if (rs.type == "llama3") {
            const double wavelen = 2 * M_PI / inv;
            const double old = static_cast<double>(rs.original_max_position_embeddings);
            if (wavelen > old / rs.low_freq_factor) {
                inv /= rs.factor;  // long wavelengths: interpolated
            } else if (wavelen >= old / rs.high_freq_factor) {
                const double smooth = (old / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
                inv = (1 - smooth) * inv / rs.factor + smooth * inv;
            }
        }
        f.push_back(inv);
    }
    return f;
}

// Rotates pairs (x_i, x_{i+d/2}) of row p by p * theta_i.
at::Tensor rope(const at::Tensor& x, const std::vector<double>& freqs) {
    const auto len = x.size(0), half = x.size(1) / 2;
    at::Tensor out = x.clone();
    auto xa = x.accessor<double, 2>();
    auto oa = out.accessor<double, 2>();
    for (std::int64_t p = 0; p < len; ++p)
        for (std::int64_t i = 0; i < half; ++i) {
            const double a = static_cast<double>(p) * freqs[static_cast<std::size_t>(i)];
            const double x1 = xa[p][i], x2 = xa[p][i + half];
            oa[p][i] = x1 * std::cos(a) - x2 * std::sin(a);
            oa[p][i + half] = x2 * std::cos(a) + x1 * std::sin(a);
        }
    return out;
}

// Qwen3-MoE's sparse MLP token by token: softmax over all experts, the k most probable
// (renormalised over those k when norm_topk_prob), each a SwiGLU from its own HF tensors.
at::Tensor moe_mlp(const ModelShape& s, const std::function<at::Tensor(const std::string&)>& w, const std::string& p,
                   const at::Tensor& x) {
    at::Tensor out = at::zeros_like(x);
    const at::Tensor probs = at::softmax(x.matmul(w(p + "mlp.gate.weight").t()), 1);
    for (std::int64_t t = 0; t < x.size(0); ++t) {
        std::vector<std::int64_t> experts(static_cast<std::size_t>(s.num_experts));
        std::iota(experts.begin(), experts.end(), 0);
        auto pa = probs[t];
        std::stable_sort(experts.begin(), experts.end(),
                         [&](std::int64_t a, std::int64_t b) { return pa[a].item<double>() > pa[b].item<double>(); });
        double total = 0;
        for (std::int64_t j = 0; j < s.num_experts_per_tok; ++j) total += pa[experts[j]].item<double>();
        at::Tensor xt = x[t];
        for (std::int64_t j = 0; j < s.num_experts_per_tok; ++j) {
            const std::string e = p + "mlp.experts." + std::to_string(experts[j]) + ".";
            at::Tensor gate = w(e + "gate_proj.weight").matmul(xt), up = w(e + "up_proj.weight").matmul(xt);
            const double weight = pa[experts[j]].item<double>() / (s.norm_topk_prob ? total : 1.0);
            out[t].add_(weight * w(e + "down_proj.weight").matmul(gate * at::sigmoid(gate) * up));
        }
    }
    return out;
}

} // namespace

NaiveOutput naive_forward(const ModelShape& s, const model::TensorMap& weights,
                          const std::vector<std::vector<std::int64_t>>& sequences) {
    const std::function<at::Tensor(const std::string&)> w = [&](const std::string& name) {
        return weights.at(name).to(at::kDouble);
    };
    const auto freqs = frequencies(s);
    const std::int64_t d = s.head_dim, group = s.num_heads / s.num_kv_heads;
    const double eps = s.rms_norm_eps;
    std::vector<std::vector<at::Tensor>> per_layer(static_cast<std::size_t>(s.num_layers));
    std::vector<at::Tensor> logits;
    for (const auto& seq : sequences) {
        const auto len = static_cast<std::int64_t>(seq.size());
        at::Tensor h = w("model.embed_tokens.weight").index_select(0, at::tensor(seq, at::kLong));
        at::Tensor causal = at::ones({len, len}, at::kBool).tril();
        for (std::int64_t l = 0; l < s.num_layers; ++l) {
            const std::string p = "model.layers." + std::to_string(l) + ".";
            at::Tensor x = rms(h, w(p + "input_layernorm.weight"), eps);
            at::Tensor q = x.matmul(w(p + "self_attn.q_proj.weight").t());
            at::Tensor k = x.matmul(w(p + "self_attn.k_proj.weight").t());
            at::Tensor v = x.matmul(w(p + "self_attn.v_proj.weight").t());
            at::Tensor attn = at::zeros({len, s.num_heads * d}, at::kDouble);
            for (std::int64_t head = 0; head < s.num_heads; ++head) {
                const std::int64_t kv = head / group;
                at::Tensor qh = q.narrow(1, head * d, d), kh = k.narrow(1, kv * d, d), vh = v.narrow(1, kv * d, d);
                if (s.arch == "qwen3" || s.arch == "qwen3_moe") {
                    qh = rms(qh, w(p + "self_attn.q_norm.weight"), eps);
                    kh = rms(kh, w(p + "self_attn.k_norm.weight"), eps);
                }
                qh = rope(qh.contiguous(), freqs);
                kh = rope(kh.contiguous(), freqs);
                at::Tensor scores = qh.matmul(kh.t()) / std::sqrt(static_cast<double>(d));
                scores = scores.masked_fill(causal.logical_not(), -INFINITY);
                attn.narrow(1, head * d, d).copy_(at::softmax(scores, 1).matmul(vh));
            }
            h = h + attn.matmul(w(p + "self_attn.o_proj.weight").t());
            x = rms(h, w(p + "post_attention_layernorm.weight"), eps);
            if (s.is_moe_layer(l)) {
                h = h + moe_mlp(s, w, p, x);
            } else {
                at::Tensor gate = x.matmul(w(p + "mlp.gate_proj.weight").t());
                at::Tensor up = x.matmul(w(p + "mlp.up_proj.weight").t());
                h = h + (gate * at::sigmoid(gate) * up).matmul(w(p + "mlp.down_proj.weight").t());
            }
            const bool last = l == s.num_layers - 1;
            per_layer[static_cast<std::size_t>(l)].push_back(last ? rms(h, w("model.norm.weight"), eps) : h);
        }
        at::Tensor head_w = weights.count("lm_head.weight") ? w("lm_head.weight") : w("model.embed_tokens.weight");
        logits.push_back(rms(h, w("model.norm.weight"), eps).matmul(head_w.t()));
    }
    NaiveOutput out;
    for (auto& parts : per_layer) out.layers.push_back(at::cat(parts, 0));
    out.logits = at::cat(logits, 0);
    return out;
}

} // namespace hsring::test
