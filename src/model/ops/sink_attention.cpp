// Attention with sinks and a sliding window (see sink_attention.hpp), in transformers' order of
// operations: scores in the compute dtype, + mask, [scores | sink], minus the row max, softmax,
// the sink column dropped, times the values.
#include "model/ops/sink_attention.hpp"

#include "hsring/error.hpp"
#include "model/io/safetensors.hpp"

#include <ATen/ATen.h>

#include <limits>
#include <optional>

namespace hsring::model {

at::Tensor sink_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                          const std::vector<std::int64_t>& cu_seqlens, std::int64_t window, double scale) {
    const std::int64_t hq = q.size(1), hkv = k.size(1), d = q.size(2);
    HSRING_ASSERT(q.dim() == 3 && k.dim() == 3 && v.sizes() == k.sizes() && hkv > 0 && hq % hkv == 0 &&
                      sinks.numel() == hq && !cu_seqlens.empty() && cu_seqlens.back() == q.size(0),
                  "sink_attention: q [{} x {} x {}], k/v with {} heads, {} sinks, {} tokens packed", q.size(0), hq, d,
                  hkv, sinks.numel(), cu_seqlens.back());
    const std::int64_t rep = hq / hkv;
    const at::Tensor sink = sinks.to(q.scalar_type()).view({hq, 1, 1});
    const double lowest = q.scalar_type() == at::kBFloat16 ? static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest())
                          : q.scalar_type() == at::kHalf   ? static_cast<double>(std::numeric_limits<c10::Half>::lowest())
                                                           : static_cast<double>(std::numeric_limits<float>::lowest());
    std::vector<at::Tensor> outs;
    for (std::size_t s = 0; s + 1 < cu_seqlens.size(); ++s) {
        const std::int64_t a = cu_seqlens[s], len = cu_seqlens[s + 1] - a;
        if (len == 0) continue;
        auto heads_first = [&](const at::Tensor& x, std::int64_t repeat) {  // [len, H, D] -> [H * repeat, len, D]
            at::Tensor t = x.narrow(0, a, len);
            if (repeat > 1) t = t.repeat_interleave(repeat, 1);
            return t.transpose(0, 1);
        };
        const at::Tensor qs = heads_first(q, 1), ks = heads_first(k, rep), vs = heads_first(v, rep);
        at::Tensor scores = at::matmul(qs, ks.transpose(1, 2)) * scale;  // [Hq, len, len]
        const auto longs = at::TensorOptions().dtype(at::kLong).device(q.device());
        const at::Tensor i = at::arange(len, longs).view({len, 1}), j = at::arange(len, longs).view({1, len});
        at::Tensor visible = j <= i;
        if (window > 0) visible = visible & (j > i - window);
        // As transformers: the dtype's lowest finite value (torch.finfo(dtype).min), not -inf
        // (identical after the softmax); float's lowest would overflow bf16 / fp16.
        scores = scores.masked_fill(visible.logical_not(), lowest);
        at::Tensor combined = at::cat({scores, sink.expand({hq, len, 1})}, -1);
        combined = combined - std::get<0>(combined.max(-1, /*keepdim=*/true));
        const at::Tensor probs = at::softmax(combined, -1).narrow(-1, 0, len);
        outs.push_back(at::matmul(probs, vs).transpose(0, 1));  // [len, Hq, D]
    }
    if (outs.empty()) return at::empty_like(q);
    return at::cat(outs, 0);
}

at::Tensor packed_sink_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& sinks, const PackedSequences& seqs, std::int64_t window,
                                 double scale) {
    const bool flash = q.is_cuda() && (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf) &&
                       q.size(-1) <= 256 && q.size(-1) % 8 == 0 && seqs.cu_device.defined();
    if (!flash) return sink_attention(q, k, v, sinks, seqs.cu, window, scale);
    std::optional<std::int64_t> left, right;
    if (window > 0) {
        left = window - 1;  // flash counts the keys before the query; the query itself is visible
        right = 0;
    }
    auto res = at::_flash_attention_forward(q.contiguous(), k.contiguous(), v.contiguous(), seqs.cu_device,
                                            seqs.cu_device, seqs.max_len, seqs.max_len, /*dropout_p=*/0.0,
                                            /*is_causal=*/true, /*return_debug_mask=*/false, scale, left, right);
    const at::Tensor& out = std::get<0>(res);  // [T, Hq, D]
    const at::Tensor& lse = std::get<1>(res);  // [Hq, T] fp32: log sum_j exp(scale q.k_j)
    HSRING_ASSERT(lse.dim() == 2 && lse.size(0) == q.size(1) && lse.size(1) == q.size(0),
                  "flash varlen log-sum-exp has shape {}, expected [{}, {}]", shape_str(lse.sizes()), q.size(1),
                  q.size(0));
    // softmax over [scores | sink] = softmax(scores) * Z / (Z + e^sink) = softmax(scores) * sigmoid(lse - sink)
    const at::Tensor keep = at::sigmoid(lse - sinks.to(at::kFloat).view({-1, 1})).transpose(0, 1).unsqueeze(-1);
    return (out.to(at::kFloat) * keep).to(q.scalar_type());
}

} // namespace hsring::model
