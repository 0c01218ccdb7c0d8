// Gradient sums over the gang (see gradient_sync.hpp).
#include "distributed/gradient_sync.hpp"

#include "hsring/error.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/distributed/c10d/reducer.hpp>

namespace hsring::distributed {

GradientSync::GradientSync(C10dGang& gang, std::vector<at::Tensor> params) : gang_(gang), params_(std::move(params)) {
    const std::vector<std::vector<std::size_t>> buckets =
        std::get<0>(c10d::compute_bucket_assignment_by_size(params_, {c10d::kDefaultFirstBucketBytes,
                                                                       c10d::kDefaultBucketBytesCap}));
    reducer_ = std::make_unique<c10d::Reducer>(
        params_, buckets, gang.process_group(), std::vector<bool>(params_.size(), false),
        /*bucket_bytes_cap=*/c10d::kDefaultBucketBytesCap, /*find_unused_parameters=*/false,
        /*gradient_as_bucket_view=*/false, std::unordered_map<std::size_t, std::string>{},
        /*first_bucket_bytes_cap=*/c10d::kDefaultFirstBucketBytes, /*skip_all_reduce_unused_params=*/false,
        /*use_python_reducer=*/false, std::vector<std::int64_t>{});
}

GradientSync::~GradientSync() = default;

void GradientSync::arm(const at::Tensor& loss) { reducer_->prepare_for_backward({loss}); }

void GradientSync::reduce_now() {
    // Every parameter gets a zero added to its gradient: each one's hook fires, every bucket is
    // reduced, and the result is the sum of what the ranks accumulated.
    at::Tensor zero;
    for (const auto& p : params_) {
        at::Tensor z = (p * 0).sum();
        zero = zero.defined() ? zero + z : z;
    }
    arm(zero);
    try {
        zero.backward();
    } catch (const std::exception& e) {
        fail("the drafter gang broke while summing gradients (a peer rank died or hung): {}", e.what());
    }
}

void GradientSync::broadcast(std::vector<at::Tensor>& tensors) {
    for (auto& t : tensors) {
        std::vector<at::Tensor> one{t};
        gang_.wait(gang_.process_group()->broadcast(one), "the broadcast of the master's state");
    }
}

} // namespace hsring::distributed
