#include "model/ops/recompute.hpp"

#include "hsring/error.hpp"

#include <ATen/core/ivalue.h>
#include <torch/autograd.h>

namespace hsring::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The function travels to backward in the node's saved data.
struct FnHolder : torch::CustomClassHolder {
    explicit FnHolder(RecomputedFn f) : fn(std::move(f)) {}
    RecomputedFn fn;
};

struct RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
    // Runs under no grad (the autograd Function's forward): fn's activations are freed at once.
    static at::Tensor forward(AutogradContext* ctx, at::TensorList inputs, const RecomputedFn& fn) {
        ctx->save_for_backward(inputs.vec());
        ctx->saved_data["fn"] = at::IValue::make_capsule(c10::make_intrusive<FnHolder>(fn));
        return fn(inputs.vec());
    }

    static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
        const variable_list saved = ctx->get_saved_variables();
        const auto fn = c10::static_intrusive_pointer_cast<FnHolder>(ctx->saved_data["fn"].toCapsule());
        // Fresh leaves for the second graph: their gradients are what this node returns.
        std::vector<at::Tensor> leaves;
        std::vector<at::Tensor> wanted;
        leaves.reserve(saved.size());
        for (std::size_t i = 0; i < saved.size(); ++i) {
            at::Tensor leaf = saved[i].detach();
            if (ctx->needs_input_grad(i)) {
                leaf.requires_grad_(true);
                wanted.push_back(leaf);
            }
            leaves.push_back(std::move(leaf));
        }
        at::Tensor out;
        {
            at::AutoGradMode grad_on(true);
            out = fn->fn(leaves);
        }
        std::vector<at::Tensor> grads;
        if (!wanted.empty() && out.requires_grad() && grad_out[0].defined())
            grads = torch::autograd::grad({out}, wanted, {grad_out[0]}, /*retain_graph=*/false,
                                          /*create_graph=*/false, /*allow_unused=*/true);
        variable_list result(saved.size() + 1);  // one per input tensor, then fn (no gradient)
        for (std::size_t i = 0, k = 0; i < saved.size(); ++i)
            if (ctx->needs_input_grad(i)) result[i] = k < grads.size() ? grads[k++] : at::Tensor();
        return result;
    }
};

} // namespace

at::Tensor recompute_in_backward(RecomputedFn fn, const std::vector<at::Tensor>& inputs) {
    bool needs_grad = false;
    for (const auto& t : inputs) needs_grad = needs_grad || (t.defined() && t.requires_grad());
    if (!at::GradMode::is_enabled() || !needs_grad) return fn(inputs);
    return RecomputeFunction::apply(at::TensorList(inputs), fn);
}

} // namespace hsring::model
