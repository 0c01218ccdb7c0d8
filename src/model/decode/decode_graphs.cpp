#include "model/decode/decode_graphs.hpp"

#include "hsring/error.hpp"
#include "hsring/log.hpp"

#include <ATen/ATen.h>
#ifdef HSRING_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <cstring>

namespace hsring::model {

struct DecodeGraphs::Graph {
    at::Tensor ids;     // [2, rows * n] int64 on the device: the graph's input
    at::Tensor logits;  // the graph's output
    std::vector<std::pair<std::size_t, at::Tensor>> layers;  // (layer_ids index, hidden): outputs too
#ifdef HSRING_TORCH_CUDA
    std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
};

DecodeGraphs::DecodeGraphs(TargetModel& model, bool graphs, std::int64_t bucket)
    : model_(model), fixed_(model.graphable()), bucket_(bucket) {
    if (bucket < 1) fail("decode graphs: bucket must be >= 1 positions, got {}", bucket);
#ifdef HSRING_TORCH_CUDA
    capture_ = fixed_ && graphs && model.device().is_cuda();
#else
    (void)graphs;
#endif
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
    const std::int64_t window = std::min(cap, (longest + bucket_ - 1) / bucket_ * bucket_);
    at::Tensor logits;
    if (!capture_) {
        const at::Tensor ids = at::tensor(host, at::kLong).view({2, t}).to(model_.device());
        logits = model_.forward_static(ids, n, window, cache, layer_ids, on_layer);
    } else {
#ifdef HSRING_TORCH_CUDA
        // The graphs write into this cache's storage: a cache that moved gets new ones.
        std::vector<const void*> storage;
        for (std::int64_t l = 0; l < cache.num_layers(); ++l) {
            storage.push_back(cache.keys(l).data_ptr());
            storage.push_back(cache.values(l).data_ptr());
        }
        const void* first = storage.front();
        if (first != storage_) {
            graphs_.clear();
            storage_ = first;
        }
        Key key{storage, rows, cap, n, window, layer_ids};
        std::unique_ptr<Graph>& g = graphs_[key];
        if (!host_.defined() || host_.numel() < 2 * t)
            host_ = at::empty({std::max<std::int64_t>(2 * t, 64)}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
        std::memcpy(host_.data_ptr<std::int64_t>(), host.data(), host.size() * sizeof(std::int64_t));
        // A blocking copy: the pinned buffer is free for the next step once it returns.
        const at::Tensor src = host_.narrow(0, 0, 2 * t).view({2, t});
        if (!g) {
            auto made = std::make_unique<Graph>();
            made->ids = at::empty({2, t}, at::TensorOptions().dtype(at::kLong).device(model_.device()));
            made->ids.copy_(src);
            // Warm up and capture on a side stream (a capture must not run on the default stream):
            // the warm-up initialises cuBLAS and attention workspaces outside the graph, and writes
            // the same keys/values the replay writes again.
            const c10::DeviceIndex dev = model_.device().index();
            c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(dev);
            c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, dev);
            at::cuda::CUDAEvent ready, captured;
            ready.record(current);
            ready.block(side);
            try {
                c10::cuda::CUDAStreamGuard guard(side);
                model_.forward_static(made->ids, n, window, cache, layer_ids, {});
                made->graph = std::make_unique<at::cuda::CUDAGraph>();
                made->graph->capture_begin();
                made->logits = model_.forward_static(made->ids, n, window, cache, layer_ids,
                                                     [&](std::size_t i, const at::Tensor& h) { made->layers.emplace_back(i, h); });
                made->graph->capture_end();
            } catch (const std::exception& e) {
                // Something in the step could not be captured: the same fixed-shape work runs
                // directly from now on (correct, only launched op by op), and the log says why.
                // A capture left open would keep the pool stream capturing: end it.
                cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
                if (cudaStreamIsCapturing(side.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
                    cudaGraph_t dead = nullptr;
                    cudaStreamEndCapture(side.stream(), &dead);
                    if (dead) cudaGraphDestroy(dead);
                }
                (void)cudaGetLastError();
                captured.record(side);
                captured.block(current);
                graphs_.erase(key);
                capture_ = false;
                log::warn("decode engine: a {}-token step of {} could not be captured as a CUDA graph ({}); "
                          "running its steps without graphs", n, s.source, e.what());
                return step(tokens, n, cache, layer_ids, on_layer);
            }
            captured.record(side);
            captured.block(current);
            g = std::move(made);
        } else {
            g->ids.copy_(src);
        }
        g->graph->replay();  // on the current stream
        if (on_layer)
            for (const auto& [i, h] : g->layers) on_layer(i, h);
        logits = g->logits;
#endif
    }
    for (std::int64_t r = 0; r < rows; ++r) cache.grow(r, n);
    return logits;
}

} // namespace hsring::model
