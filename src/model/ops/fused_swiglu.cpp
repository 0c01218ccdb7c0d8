#include "model/ops/fused_swiglu.hpp"

#include "hsring/error.hpp"
#include "model/ops/kernel_call.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#if HSRING_KERNELS_ON
#include "kernels/swiglu.hpp"
#endif

namespace hsring::model {
namespace {

#if HSRING_KERNELS_ON
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct SwiGluFunction : public torch::autograd::Function<SwiGluFunction> {
    static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
        const at::Tensor g = gate.contiguous(), u = up.contiguous();
        at::Tensor y = at::empty_like(g, at::MemoryFormat::Contiguous);
        kernels::SwiGluArgs a;
        a.n = g.numel();
        a.gate = g.data_ptr();
        a.up = u.data_ptr();
        a.out = y.data_ptr();
        a.dtype = kernel_call::dtype(g.scalar_type());
        a.stream = kernel_call::stream(g);
        kernel_call::check(kernels::swiglu_forward(a), "swiglu forward [{}]", a.n);
        ctx->save_for_backward({g, u});
        return y;
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const variable_list s = ctx->get_saved_variables();
        const at::Tensor& g = s[0];
        const at::Tensor& u = s[1];
        const at::Tensor dy = grads[0].contiguous();
        at::Tensor dg = at::empty_like(g), du = at::empty_like(u);
        kernels::SwiGluArgs a;
        a.n = g.numel();
        a.gate = g.data_ptr();
        a.up = u.data_ptr();
        a.grad_out = dy.data_ptr();
        a.grad_gate = dg.data_ptr();
        a.grad_up = du.data_ptr();
        a.dtype = kernel_call::dtype(g.scalar_type());
        a.stream = kernel_call::stream(g);
        kernel_call::check(kernels::swiglu_backward(a), "swiglu backward [{}]", a.n);
        return {dg, du};
    }
};
#endif

} // namespace

at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up) {
    HSRING_ASSERT(gate.sizes() == up.sizes() && gate.scalar_type() == up.scalar_type(),
                  "fused_swiglu: gate and up of one shape and dtype");
#if HSRING_KERNELS_ON
    if (gate.is_cuda() && up.is_cuda() && kernel_call::supported(gate.scalar_type()))
        return SwiGluFunction::apply(gate, up);
#endif
    return at::silu(gate) * up;
}

} // namespace hsring::model
