#include "worker/torch/snapshot_buffers.hpp"

#include "hsring/log.hpp"

#include <ATen/ATen.h>

#include <chrono>
#include <thread>

namespace hsring::worker {

SnapshotBuffers::~SnapshotBuffers() {
    if (thread_.valid()) thread_.wait();
}

void SnapshotBuffers::plan_pinned(std::vector<std::vector<std::int64_t>> shapes) {
    pinned_ = true;
    shapes_ = std::move(shapes);
}

void SnapshotBuffers::allocate() {
    if (shapes_.empty()) return;
    auto promises = std::make_shared<std::array<std::promise<std::shared_ptr<HostState>>, 2>>();
    for (std::size_t i = 0; i < 2; ++i) ready_[i] = (*promises)[i].get_future();
    // One tensor at a time with a pause after each: a cudaHostAlloc holds up this process's other
    // CUDA calls while it runs (all 12 GB in one go stretched a step by ~5 s on an H200), so many
    // short ones with room between them let the steps go on.
    thread_ = std::async(std::launch::async, [promises, shapes = std::move(shapes_), lock = alloc_mutex_] {
        for (auto& promise : *promises) {
            try {
                auto h = std::make_shared<HostState>();
                const auto opts = at::TensorOptions().dtype(at::kFloat).pinned_memory(true);
                for (const auto& s : shapes)
                    for (auto* v : {&h->params, &h->exp_avg, &h->exp_avg_sq}) {
                        {
                            std::lock_guard<std::mutex> hold(*lock);  // not while a snapshot copies
                            v->push_back(at::empty(s, opts));
                        }
                        std::this_thread::sleep_for(std::chrono::milliseconds(50));
                    }
                promise.set_value(std::move(h));
            } catch (...) {
                promise.set_exception(std::current_exception());
            }
        }
    });
    shapes_.clear();
}

void SnapshotBuffers::collect() {
    for (std::size_t i = 0; i < 2; ++i)
        if (ready_[i].valid() && ready_[i].wait_for(std::chrono::seconds(0)) == std::future_status::ready)
            states_[i] = ready_[i].get();
}

bool SnapshotBuffers::ready_now() {
    if (!pinned_) return true;
    collect();
    for (const auto& h : states_)
        if (h && h.use_count() == 1) return true;
    return false;
}

std::shared_ptr<HostState>& SnapshotBuffers::acquire() {
    collect();
    for (auto& h : states_)
        if (h && h.use_count() == 1) return h;
    for (std::size_t i = 0; i < 2; ++i)
        if (ready_[i].valid()) return states_[i] = ready_[i].get();
    for (auto& h : states_)
        if (!h) return h = std::make_shared<HostState>();  // unpinned: allocated by the copies
    // Both held: the protocol never takes a third snapshot; a fresh buffer rather than a wait.
    log::warn("checkpoint: both snapshot buffers are held by writes: copying into a new one");
    return states_[0] = std::make_shared<HostState>();
}

} // namespace hsring::worker
