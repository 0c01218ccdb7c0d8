#pragma once
// Summing a model's gradients over the drafter gang, with c10d's own DDP machinery
// (c10d::Reducer): parameters are grouped in buckets (25 MiB, in reverse order of registration,
// roughly the order backward produces them) and each bucket's all-reduce starts as soon as its
// last gradient is ready, so communication overlaps the rest of the backward pass.
//
// Gradient accumulation: backward passes that are not armed only accumulate into .grad (the
// reducer's hooks stay idle); the armed one reduces the whole accumulated gradient. The reducer
// averages over the gang (it divides by the world size): callers that want the sum multiply by
// world() (the drafter divides by the global loss weight anyway).
//
// Also the broadcast of the master's tensors (weights, optimizer state) to every rank.
#include "distributed/c10d_gang.hpp"

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

namespace c10d {
class Reducer;
}

namespace hsring::distributed {

class GradientSync {
public:
    // `params`: the leaf tensors whose .grad is summed, in the same order on every rank.
    GradientSync(C10dGang& gang, std::vector<at::Tensor> params);
    ~GradientSync();

    // The next backward pass, from `loss`, reduces the accumulated gradients (overlapped).
    void arm(const at::Tensor& loss);
    // Reduces the accumulated gradients now (a backward of a zero loss through every parameter:
    // for a step whose last batch trained nothing, or a rank without data in this step).
    void reduce_now();
    std::uint32_t world() const { return gang_.world(); }

    // Rank 0's values of `tensors` on every rank, in place.
    void broadcast(std::vector<at::Tensor>& tensors);

private:
    C10dGang& gang_;
    std::vector<at::Tensor> params_;
    std::unique_ptr<c10d::Reducer> reducer_;
};

} // namespace hsring::distributed
