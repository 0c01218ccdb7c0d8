#pragma once
// Summing a model's gradients over the drafter gang, with c10d's own DDP machinery
// (c10d::Reducer), driven the way torch's DistributedDataParallel drives it:
// - Buckets (1 MiB first, then 25 MiB) are assigned in parameter order and handed to the
//   reducer reversed: backward produces the last parameters' gradients first, so bucket 0 (the
//   last parameters) is ready early and its all-reduce overlaps the rest of the backward pass.
// - After the first reduced backward the reducer rebuilds its buckets in the order the
//   gradients really arrived (rank 0's order, broadcast), once.
// - The gradients are views of the buckets (gradient_as_bucket_view): one fp32 copy of the
//   gradients per rank, not two. They stay views whatever the optimizer's zero_grad does: they
//   are plain aliases of the bucket memory (libtorch's zero_grad detach_()es every gradient,
//   which autograd forbids on a view), and a gradient set to undefined is pointed back at its
//   (zeroed) bucket slice before the next backward accumulates into it.
// - Every bucket's all-reduce is waited for, at most [distributed] timeout_s, before the
//   backward returns: a dead or hung peer ends in GangBroken (never a hang in a later device
//   sync, never ProcessGroupNCCL's watchdog tearing the process down; see c10d_gang.hpp).
//
// Gradient accumulation: backward passes that are not armed only accumulate into .grad (the
// reducer's hooks stay idle); the armed one reduces the whole accumulated gradient. The reducer
// averages over the gang (it divides by the world size): callers that want the sum multiply by
// world() (the drafter divides by the global loss weight anyway).
//
// Also the broadcast of the master's tensors (weights, optimizer state) to every rank.
#include "distributed/c10d_gang.hpp"

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace c10d {
class Reducer;
class Work;
}
namespace torch::autograd {
struct Node;
}

namespace hsring::distributed {

// torch's DDP defaults (c10d::kDefaultFirstBucketBytes, kDefaultBucketBytesCap); tests use
// small ones to get several buckets out of a tiny model.
struct BucketSizes {
    std::size_t first_bytes = 1024 * 1024;
    std::size_t bytes = 25 * 1024 * 1024;
};

class GradientSync {
public:
    // `params`: the leaf tensors whose .grad is summed, in the same order on every rank
    // (contiguous: their gradients are slices of the buckets).
    GradientSync(C10dGang& gang, std::vector<at::Tensor> params, BucketSizes sizes = {});
    ~GradientSync();
    GradientSync(const GradientSync&) = delete;
    GradientSync& operator=(const GradientSync&) = delete;

    // The next backward pass, from `loss`, reduces the accumulated gradients (overlapped).
    // Throws GangBroken (from that backward) when the gang broke.
    void arm(const at::Tensor& loss);
    // Reduces the accumulated gradients now (a backward of a zero loss through every parameter:
    // for a step whose last batch trained nothing, or a rank without data in this step).
    void reduce_now();
    std::uint32_t world() const { return gang_.world(); }

    // Rank 0's values of `tensors` on every rank, in place.
    void broadcast(std::vector<at::Tensor>& tensors);

    // The buckets in the order their all-reduces start, as indices into `params`.
    std::vector<std::vector<std::size_t>> buckets() const;
    // Whether the buckets were rebuilt in the order the gradients arrived (after the first
    // reduced backward).
    bool rebuilt() const { return rebuilt_; }

private:
    class AllReduceHook;
    class GradIntoBucket;
    friend class AllReduceHook;
    friend class GradIntoBucket;

    // The bucket slice of every parameter, as a plain alias (not an autograd view).
    void alias_buckets();
    // Every parameter's .grad is its bucket slice (the reduced values live there).
    void point_grads_at_buckets();
    // Autograd final callbacks of an armed backward: wait for every bucket's all-reduce (before
    // the reducer's own finalisation), then (after it) rebuild once and re-point the gradients.
    void wait_for_reductions();
    void after_reduction();

    C10dGang& gang_;
    std::vector<at::Tensor> params_;
    std::unique_ptr<c10d::Reducer> reducer_;
    std::vector<at::Tensor> bucket_slices_;   // per parameter
    std::vector<c10::intrusive_ptr<c10d::Work>> pending_;  // this backward's bucket all-reduces
    std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // per parameter, with our pre-hook
    std::vector<const void*> pre_hooks_;      // ours, to remove them again
    bool rebuilt_ = false;
};

} // namespace hsring::distributed
