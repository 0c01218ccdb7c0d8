#pragma once
// The drafter's host buffers for checkpoint snapshots (double buffering): a snapshot is copied into
// the buffer no background write holds (CheckpointWriter keeps at most two writes in flight, each
// holding its buffer through the shared pointer until it has written it).
//
//   buffer 0, buffer 1: pinned on a GPU run with background checkpoints, allocated on a thread of
//   their own after the first step, one after the other (cudaHostAlloc of ~12 GB took 7-9 s on an
//   H200 host: a pause if done at the checkpoint; and while it runs the driver holds up this
//   process's other CUDA calls, so not at start either, where it stretched the first step after a
//   restart); otherwise empty, filled by the snapshot's own copies.
//
// Thread-safety: the drafter loop's thread only (the allocation thread touches only its promises).
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hsring::worker {

// The drafter's fp32 parameters and AdamW state in host memory (pinned on a GPU, so the device
// copies run at PCIe speed).
struct HostState {
    std::vector<std::string> names;
    std::vector<at::Tensor> params;  // in parameter order: the optimizer archive's keys
    std::vector<at::Tensor> exp_avg, exp_avg_sq, max_exp_avg_sq;  // exp_avg undefined: no AdamW state yet
    std::vector<std::int64_t> steps;
};

class SnapshotBuffers {
public:
    ~SnapshotBuffers();
    // At restore: the pinned buffers to allocate later (each parameter's shape, for the weights and
    // both AdamW moments). Without it the buffers are unpinned and allocated by the copies.
    void plan_pinned(std::vector<std::vector<std::int64_t>> shapes);
    // Starts allocating the planned pinned buffers (once; after the first step).
    void allocate();
    // A buffer is allocated and no write holds it, or none was planned (unpinned buffers).
    bool ready_now();
    // The buffer no write holds: an allocated one first, then one still being allocated (waiting
    // for it: only a checkpoint in the step, or one that comes before the first step ends).
    std::shared_ptr<HostState>& acquire();
    // Holds the allocation of the second buffer while a snapshot copies into the first: a
    // cudaHostAlloc running during the device -> host copies held them up (the first checkpoint of
    // an H200 run paused 1.2 s against 0.25-0.35 s for the others). The allocation waits at most
    // for the end of the copy; the copy at most for one tensor's allocation.
    std::unique_lock<std::mutex> hold_allocation() { return std::unique_lock<std::mutex>(*alloc_mutex_); }

private:
    bool pinned_ = false;
    std::vector<std::vector<std::int64_t>> shapes_;  // planned, not yet being allocated
    std::array<std::shared_ptr<HostState>, 2> states_;
    std::array<std::future<std::shared_ptr<HostState>>, 2> ready_;
    std::future<void> thread_;
    std::shared_ptr<std::mutex> alloc_mutex_ = std::make_shared<std::mutex>();  // held per tensor allocated
    void collect();  // takes the buffers whose allocation has finished (rethrows a failed one)
};

} // namespace hsring::worker
