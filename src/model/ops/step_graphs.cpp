#include "model/ops/step_graphs.hpp"

#include "hsring/log.hpp"

#include <ATen/ATen.h>
#ifdef HSRING_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace hsring::model {

struct StepGraphs::Graph {
    at::Tensor longs;                 // [n] int64 on the device: the graph's input
    std::vector<at::Tensor> tensors;  // its copies of the tensor inputs
    std::vector<at::Tensor> outputs;  // its outputs
#ifdef HSRING_TORCH_CUDA
    std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
};

// The longs go to the device through one pinned buffer; `copied` marks the end of the last copy
// out of it, so the host overwrites it only once that copy ran (usually long before).
struct StepGraphs::Staging {
    at::Tensor host;
#ifdef HSRING_TORCH_CUDA
    at::cuda::CUDAEvent copied;
#endif
};

StepGraphs::StepGraphs(at::Device device, bool capture, std::string what)
    : device_(device), capture_(capture && device.is_cuda()), what_(std::move(what)),
      staging_(std::make_unique<Staging>()) {
#ifndef HSRING_TORCH_CUDA
    capture_ = false;
#endif
}

StepGraphs::~StepGraphs() = default;

std::int64_t StepGraphs::window(std::int64_t length, std::int64_t capacity, std::int64_t bucket) {
    return std::min(capacity, std::max<std::int64_t>(1, (length + bucket - 1) / bucket * bucket));
}

std::int64_t StepGraphs::address(const at::Tensor& t) {
    return static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(t.data_ptr()));
}

void StepGraphs::bind(const void* storage) {
    if (storage == storage_) return;
    graphs_.clear();
    storage_ = storage;
}

void StepGraphs::clear() {
    graphs_.clear();
    storage_ = nullptr;
}

std::vector<at::Tensor> StepGraphs::run(const Key& key, const std::vector<std::int64_t>& longs,
                                        const std::vector<at::Tensor>& tensors, const Body& body) {
    if (!capture_) return body(at::tensor(longs, at::kLong).to(device_), tensors);
#ifdef HSRING_TORCH_CUDA
    std::unique_ptr<Graph>& slot = graphs_[key];
    if (!slot) {
        auto made = std::make_unique<Graph>();
        std::vector<at::Tensor> out = capture(*made, key, longs, tensors, body);
        if (capture_) slot = std::move(made);  // else the capture failed and out came from a direct run
        return out;
    }
    Graph& g = *slot;
    if (!longs.empty()) {
        Staging& s = *staging_;
        s.copied.synchronize();  // the previous run's copy out of the buffer (no-op before the first)
        if (!s.host.defined() || s.host.numel() < static_cast<std::int64_t>(longs.size()))
            s.host = at::empty({std::max<std::int64_t>(static_cast<std::int64_t>(longs.size()), 64)},
                               at::TensorOptions().dtype(at::kLong).pinned_memory(true));
        std::memcpy(s.host.data_ptr<std::int64_t>(), longs.data(), longs.size() * sizeof(std::int64_t));
        // Not blocking: the copy queues on the current stream behind whatever runs there, and the
        // replay behind it; the event guards the buffer until then.
        g.longs.copy_(s.host.narrow(0, 0, static_cast<std::int64_t>(longs.size())), /*non_blocking=*/true);
        s.copied.record(c10::cuda::getCurrentCUDAStream(device_.index()));
    }
    for (std::size_t i = 0; i < tensors.size(); ++i) g.tensors[i].copy_(tensors[i]);
    g.graph->replay();  // on the current stream
    return g.outputs;
#else
    (void)key;
    return body(at::tensor(longs, at::kLong).to(device_), tensors);
#endif
}

std::vector<at::Tensor> StepGraphs::capture(Graph& g, const Key& key, const std::vector<std::int64_t>& longs,
                                            const std::vector<at::Tensor>& tensors, const Body& body) {
#ifdef HSRING_TORCH_CUDA
    g.longs = at::tensor(longs, at::kLong).to(device_);
    for (const at::Tensor& t : tensors) g.tensors.push_back(t.to(device_).clone());
    // Warm up and capture on a side stream (a capture must not run on the default stream).
    const c10::DeviceIndex dev = device_.index();
    c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(dev);
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, dev);
    at::cuda::CUDAEvent ready, captured;
    ready.record(current);
    ready.block(side);
    try {
        c10::cuda::CUDAStreamGuard guard(side);
        body(g.longs, g.tensors);
        g.graph = std::make_unique<at::cuda::CUDAGraph>();
        g.graph->capture_begin();
        g.outputs = body(g.longs, g.tensors);
        g.graph->capture_end();
    } catch (const std::exception& e) {
        // Something in the step could not be captured: the same fixed-shape work runs directly
        // from now on. A capture left open would keep the pool stream capturing: end it.
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
        log::warn("{}: a step could not be captured as a CUDA graph ({}); running them without graphs", what_,
                  e.what());
        return body(at::tensor(longs, at::kLong).to(device_), tensors);
    }
    captured.record(side);
    captured.block(current);
    g.graph->replay();  // the captured run wrote nothing yet: this run's outputs
    return g.outputs;
#else
    (void)g;
    (void)key;
    return body(at::tensor(longs, at::kLong).to(device_), tensors);
#endif
}

} // namespace hsring::model
