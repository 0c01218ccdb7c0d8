#include "model/decode/decode_graphs.hpp"

#include "hsring/error.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace hsring::model {

DecodeGraphs::DecodeGraphs(TargetModel& model, bool graphs, std::int64_t bucket)
    : model_(model), fixed_(model.graphable()), bucket_(bucket),
      graphs_(model.device(), fixed_ && graphs, fmt::format("decode engine ({})", model.shape().source)) {
    if (bucket < 1) fail("decode graphs: bucket must be >= 1 positions, got {}", bucket);
}

DecodeGraphs::~DecodeGraphs() = default;

at::Tensor DecodeGraphs::step(const std::vector<std::int64_t>& tokens, std::int64_t n, KVCache& cache,
                              const std::vector<int>& layer_ids, const TargetModel::LayerCallback& on_layer) {
    const std::int64_t rows = cache.rows(), t = rows * n, cap = cache.capacity();
    if (n < 1 || rows < 1 || static_cast<std::int64_t>(tokens.size()) != t)
        fail("decode step: {} tokens for {} rows x {} new tokens", tokens.size(), rows, n);
    if (!fixed_) {
        return model_.forward_cached(at::tensor(tokens, at::kLong), std::vector<std::int64_t>(static_cast<std::size_t>(rows), n),
                                     cache, /*all_logits=*/true, layer_ids, on_layer);
    }
    const ModelShape& s = model_.shape();
    std::vector<std::int64_t> host(static_cast<std::size_t>(2 * t));
    std::int64_t longest = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t len = cache.length(r);
        if (len + n > cap) fail("decode step: row {} holds {} positions, {} more do not fit its capacity {}", r, len, n, cap);
        longest = std::max(longest, len + n);
        for (std::int64_t i = 0; i < n; ++i) {
            const std::int64_t tok = tokens[static_cast<std::size_t>(r * n + i)];
            if (tok < 0 || tok >= s.vocab_size)
                fail("decode step: token {} is outside the vocabulary [0, {})", tok, s.vocab_size);
            host[static_cast<std::size_t>(r * n + i)] = tok;
            host[static_cast<std::size_t>(t + r * n + i)] = len + i;
        }
    }
    const std::int64_t window = StepGraphs::window(longest, cap, bucket_);
    // The graphs write into this cache's storage: a cache that moved gets new ones.
    StepGraphs::Key key{rows, cap, n, window};
    for (std::int64_t l = 0; l < cache.num_layers(); ++l)
        for (const at::Tensor& kv : {cache.keys(l), cache.values(l)}) key.push_back(StepGraphs::address(kv));
    key.insert(key.end(), layer_ids.begin(), layer_ids.end());
    graphs_.bind(cache.keys(0).data_ptr());
    // Outputs: the logits, then the captured layers in layer_ids' order. Idempotent: a replay
    // writes the same keys/values again.
    const std::vector<at::Tensor> out = graphs_.run(key, host, {}, [&](const at::Tensor& ids, const std::vector<at::Tensor>&) {
        std::vector<at::Tensor> o(1 + layer_ids.size());
        o[0] = model_.forward_static(ids.view({2, t}), n, window, cache, layer_ids,
                                     [&](std::size_t i, const at::Tensor& h) { o[1 + i] = h; });
        for (std::size_t i = 1; i < o.size(); ++i)
            HSRING_ASSERT(o[i].defined(), "decode step: layer {} was not captured", layer_ids[i - 1]);
        return o;
    });
    if (on_layer)
        for (std::size_t i = 1; i < out.size(); ++i) on_layer(i - 1, out[i]);
    const at::Tensor logits = out[0];
    for (std::int64_t r = 0; r < rows; ++r) cache.grow(r, n);
    return logits;
}

} // namespace hsring::model
