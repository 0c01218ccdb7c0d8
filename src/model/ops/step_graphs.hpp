#pragma once
// Fixed-shape steps captured once per key as CUDA graphs and replayed: the decode engine's target
// steps (decode/decode_graphs.hpp) and the drafters' draft steps at batch 1. At batch 1 a step of
// a small or memory-bound model is dominated by launching its tens to hundreds of kernels one by
// one; a replay launches them as one.
//
//   run(key, longs, tensors, body):
//     first time for `key`: the graph's own copies of the inputs (longs -> an int64 device
//       buffer, each of `tensors` -> a device tensor of its shape), body(copies) once to warm up
//       (cuBLAS and attention workspaces are made outside the graph), then captured on a side
//       stream; its outputs are the graph's own tensors
//     later: the inputs copied into the copies, the graph replayed on the current stream; the
//       longs' copy does not wait for the stream (a step launched right after another one's
//       replay queues behind it instead of leaving the GPU idle while the host launches)
//   The outputs stay valid until the next run of the same key.
//
// A body must be idempotent: run twice on the same inputs it leaves what one run leaves (the
// warm-up and the first replay both run it; a step reads its state from one buffer and writes the
// next, never updating a tensor from itself). It reads its inputs only from the copies it is
// given, and whatever else it reads or writes
// (weights, a cache) must keep its storage: bind(storage) drops every graph when the storage the
// caller names moves. A body must not copy from the host or synchronise (a capture cannot): it
// builds every device value from its inputs. On the CPU, or with capture off, run() calls
// body(inputs) directly: the same fixed-shape work, op by op. If a capture fails, the log says why
// and every later run is direct (correct, only slower). Not thread-safe.
#include <ATen/core/Tensor.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hsring::model {

class StepGraphs {
public:
    using Key = std::vector<std::int64_t>;
    // longs: [n] int64 on the device; tensors: the inputs' copies, in run()'s order.
    using Body = std::function<std::vector<at::Tensor>(const at::Tensor& longs, const std::vector<at::Tensor>& tensors)>;

    // capture: CUDA graphs where `device` is a CUDA device (else bodies run directly); `what`
    // names the steps in the log ("the decode engine's steps of Qwen3-8B").
    StepGraphs(at::Device device, bool capture, std::string what);
    ~StepGraphs();
    StepGraphs(const StepGraphs&) = delete;
    StepGraphs& operator=(const StepGraphs&) = delete;

    // Whether runs are captured (capture asked for, a CUDA device, no capture failed so far).
    bool capturing() const { return capture_; }
    std::size_t size() const { return graphs_.size(); }
    // Drops every graph when `storage` differs from the last one bound.
    void bind(const void* storage);
    void clear();

    std::vector<at::Tensor> run(const Key& key, const std::vector<std::int64_t>& longs,
                                const std::vector<at::Tensor>& tensors, const Body& body);

    // The key window of a step over `length` cached positions: rounded up to `bucket`, at most
    // `capacity` (one graph serves every length of its bucket; the rest is masked).
    static std::int64_t window(std::int64_t length, std::int64_t capacity, std::int64_t bucket = 256);
    // A tensor's storage address, as a key element.
    static std::int64_t address(const at::Tensor& t);

private:
    struct Graph;
    std::vector<at::Tensor> capture(Graph& g, const Key& key, const std::vector<std::int64_t>& longs,
                                    const std::vector<at::Tensor>& tensors, const Body& body);
    at::Device device_;
    bool capture_;
    std::string what_;
    const void* storage_ = nullptr;
    std::map<Key, std::unique_ptr<Graph>> graphs_;
    struct Staging;
    std::unique_ptr<Staging> staging_;  // pinned staging of the longs
};

} // namespace hsring::model
