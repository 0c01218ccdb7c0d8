// Gradient sums over the gang (see gradient_sync.hpp).
#include "distributed/gradient_sync.hpp"

#include "hsring/error.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <algorithm>

namespace hsring::distributed {

static_assert(BucketSizes{}.first_bytes == c10d::kDefaultFirstBucketBytes &&
              BucketSizes{}.bytes == c10d::kDefaultBucketBytesCap, "torch's DDP bucket sizes");

// The reducer's communication hook: the bucket averaged and all-reduced (what the reducer's
// default hook does), and its Work kept so that the backward waits for it with the gang's
// timeout. The last bucket queues that wait as an autograd final callback: it runs before the
// reducer's own (queued after this returns), which copies nothing for bucket views.
class GradientSync::AllReduceHook final : public c10d::CommHookInterface {
public:
    explicit AllReduceHook(GradientSync& sync) : sync_(sync) {}

    c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
        at::Tensor& buffer = bucket.getBufferRef();
        buffer.div_(static_cast<double>(sync_.world()));
        std::vector<at::Tensor> tensors{buffer};
        c10::intrusive_ptr<c10d::Work> work;
        try {
            work = sync_.gang_.process_group()->allreduce(tensors);
        } catch (const std::exception& e) {
            throw GangBroken(fmt::format("the drafter gang broke while summing gradients (a peer rank died or hung): {}",
                                         error_text(e)));
        }
        sync_.pending_.push_back(work);
        if (bucket.isLast())
            torch::autograd::Engine::get_default_engine().queue_callback([s = &sync_] { s->wait_for_reductions(); });
        return work->getFuture();
    }

    at::Tensor parseHookResult(const c10::IValue& result) override { return c10d::detail::parseCppCommHookResult(result); }

private:
    GradientSync& sync_;
};

// Before a parameter's gradient accumulator adds the new gradient: an undefined .grad (the
// optimizer's zero_grad set it to none) becomes its zeroed bucket slice, so the accumulation
// happens in the bucket (in place: autograd adds into a defined .grad outside grad mode).
class GradientSync::GradIntoBucket final : public torch::autograd::FunctionPreHook {
public:
    GradIntoBucket(GradientSync& sync, std::size_t index) : sync_(sync), index_(index) {}

    torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
        at::Tensor& grad = sync_.params_[index_].mutable_grad();
        const at::Tensor& slice = sync_.bucket_slices_[index_];
        if (!grad.defined() || grad.unsafeGetTensorImpl() != slice.unsafeGetTensorImpl()) {
            if (grad.defined()) slice.copy_(grad);  // a gradient set by hand: keep its value
            else slice.zero_();
            grad = slice;
        }
        return grads;
    }

private:
    GradientSync& sync_;
    std::size_t index_;
};

GradientSync::GradientSync(C10dGang& gang, std::vector<at::Tensor> params, BucketSizes sizes)
    : gang_(gang), params_(std::move(params)) {
    for (const auto& p : params_) HSRING_ASSERT(p.is_contiguous(), "a gradient is a contiguous slice of a bucket");
    // As torch's DistributedDataParallel: buckets assigned in parameter order, then reversed.
    auto [assigned, limits] = c10d::compute_bucket_assignment_by_size(params_, {sizes.first_bytes, sizes.bytes});
    std::reverse(assigned.begin(), assigned.end());
    std::reverse(limits.begin(), limits.end());
    reducer_ = std::make_unique<c10d::Reducer>(
        params_, std::move(assigned), gang.process_group(), std::vector<bool>(params_.size(), false),
        /*bucket_bytes_cap=*/static_cast<std::int64_t>(sizes.bytes), /*find_unused_parameters=*/false,
        /*gradient_as_bucket_view=*/true, std::unordered_map<std::size_t, std::string>{},
        /*first_bucket_bytes_cap=*/static_cast<std::int64_t>(sizes.first_bytes),
        /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false,
        std::vector<std::int64_t>(limits.begin(), limits.end()));
    reducer_->register_comm_hook(std::make_unique<AllReduceHook>(*this));
    alias_buckets();
    point_grads_at_buckets();
    for (std::size_t i = 0; i < params_.size(); ++i) {
        auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
        HSRING_ASSERT(acc, "parameter {} is a leaf that requires grad", i);
        auto hook = std::make_unique<GradIntoBucket>(*this, i);
        pre_hooks_.push_back(hook.get());
        acc->add_pre_hook(std::move(hook));
        accumulators_.push_back(std::move(acc));
    }
}

GradientSync::~GradientSync() {
    for (std::size_t i = 0; i < accumulators_.size(); ++i) {
        auto& hooks = accumulators_[i]->pre_hooks();
        std::erase_if(hooks, [&](const auto& h) { return h.get() == pre_hooks_[i]; });
    }
}

void GradientSync::alias_buckets() {
    at::NoGradGuard no_grad;
    bucket_slices_.assign(params_.size(), at::Tensor());
    for (const auto& bucket : reducer_->get_grad_buckets(/*return_zero_tensors=*/false)) {
        const std::vector<at::Tensor> in_bucket = bucket.getParameters();
        const std::vector<at::Tensor> grads = bucket.getGradients();
        for (std::size_t j = 0; j < in_bucket.size(); ++j) {
            auto it = std::find_if(params_.begin(), params_.end(), [&](const at::Tensor& p) {
                return p.unsafeGetTensorImpl() == in_bucket[j].unsafeGetTensorImpl();
            });
            HSRING_ASSERT(it != params_.end(), "a bucket holds a parameter of ours");
            const at::Tensor& g = grads[j];
            // Same memory as the reducer's own view of it, without autograd's view bookkeeping.
            bucket_slices_[static_cast<std::size_t>(it - params_.begin())] =
                at::empty({0}, g.options()).set_(g.storage(), g.storage_offset(), g.sizes(), g.strides());
        }
    }
    for (const auto& s : bucket_slices_) HSRING_ASSERT(s.defined(), "every parameter is in a bucket");
}

void GradientSync::point_grads_at_buckets() {
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params_.size(); ++i) {
        at::Tensor& grad = params_[i].mutable_grad();
        if (!grad.defined()) continue;  // zeroed in the bucket when the next backward reaches it
        if (grad.unsafeGetTensorImpl() == bucket_slices_[i].unsafeGetTensorImpl()) continue;
        bucket_slices_[i].copy_(grad);  // a no-op when it is the reducer's view of the same memory
        grad = bucket_slices_[i];
    }
}

void GradientSync::wait_for_reductions() {
    const std::size_t n = pending_.size();
    std::vector<c10::intrusive_ptr<c10d::Work>> works = std::move(pending_);
    pending_.clear();
    for (std::size_t i = 0; i < n; ++i) {
        const std::string what = fmt::format("the all-reduce of gradient bucket {} of {}", i + 1, n);
        gang_.wait(works[i], what.c_str());
    }
    // After the reducer's finalisation, which is queued behind this callback.
    torch::autograd::Engine::get_default_engine().queue_callback([this] { after_reduction(); });
}

void GradientSync::after_reduction() {
    if (!rebuilt_) {
        // Once, as DDP does before its second forward: buckets in the order the gradients
        // arrived (rank 0's, broadcast). The gradients move into the new buckets.
        try {
            rebuilt_ = reducer_->rebuild_buckets();
        } catch (const std::exception& e) {
            throw GangBroken(fmt::format("the drafter gang broke while rebuilding its gradient buckets (a peer rank "
                                         "died or hung): {}", error_text(e)));
        }
        if (rebuilt_) alias_buckets();
    }
    point_grads_at_buckets();
}

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
    } catch (const GangBroken&) {
        throw;
    } catch (const std::exception& e) {
        // Not a user error: a collective failed once the gang had formed (CONTRACT.md, Ending).
        throw GangBroken(fmt::format("the drafter gang broke while summing gradients (a peer rank died or hung): {}",
                                     error_text(e)));
    }
}

void GradientSync::broadcast(std::vector<at::Tensor>& tensors) {
    for (auto& t : tensors) {
        std::vector<at::Tensor> one{t};
        gang_.wait(gang_.process_group()->broadcast(one), "the broadcast of the master's state");
    }
}

std::vector<std::vector<std::size_t>> GradientSync::buckets() const {
    std::vector<std::vector<std::size_t>> out;
    for (const auto& bucket : reducer_->get_grad_buckets(/*return_zero_tensors=*/false)) {
        std::vector<std::size_t> indices;
        for (const auto& p : bucket.getParameters()) {
            auto it = std::find_if(params_.begin(), params_.end(), [&](const at::Tensor& q) {
                return q.unsafeGetTensorImpl() == p.unsafeGetTensorImpl();
            });
            indices.push_back(static_cast<std::size_t>(it - params_.begin()));
        }
        out.push_back(std::move(indices));
    }
    return out;
}

} // namespace hsring::distributed
