#include "model/ops/fused_rope.hpp"

#include "hsring/error.hpp"
#include "model/ops/kernel_call.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#if HSRING_KERNELS_ON
#include "kernels/rope.hpp"

#include <c10/cuda/CUDAGuard.h>
#endif

namespace hsring::model {

#if HSRING_KERNELS_ON
namespace {

// The kernel's one direction on x (last dim contiguous) into a new contiguous tensor.
at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool transpose) {
    const c10::cuda::CUDAGuard guard(x.device());
    at::Tensor out = at::empty({x.size(0), x.size(1), x.size(2)}, x.options().memory_format(at::MemoryFormat::Contiguous));
    kernels::RopeArgs a;
    a.x = x.data_ptr();
    a.out = out.data_ptr();
    a.cos = cos.data_ptr();
    a.sin = sin.data_ptr();
    a.rows = x.size(0);
    a.heads = x.size(1);
    a.head_dim = x.size(2);
    a.x_row_stride = x.stride(0);
    a.x_head_stride = x.stride(1);
    a.table_row_stride = cos.stride(0);
    a.transpose = transpose;
    a.dtype = kernel_call::dtype(x.scalar_type());
    a.stream = kernel_call::stream(x);
    kernel_call::check(kernels::rope(a), "rotary embedding kernel on {} [{} x {} x {}]", x.device().str(), a.rows,
                       a.heads, a.head_dim);
    return out;
}

// A view of x with its last dim contiguous (the kernel's only layout requirement).
at::Tensor last_dim_dense(const at::Tensor& x) { return x.stride(2) == 1 ? x : x.contiguous(); }

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct RopeFunction : public torch::autograd::Function<RopeFunction> {
    static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
        ctx->save_for_backward({cos, sin});
        return rotate(last_dim_dense(x), cos, sin, /*transpose=*/false);
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const auto saved = ctx->get_saved_variables();
        return {rotate(last_dim_dense(grads[0]), saved[0], saved[1], /*transpose=*/true), at::Tensor(), at::Tensor()};
    }
};

} // namespace
#endif

bool fused_rope_applies(const at::Tensor& x, const RopeTables& rope) {
#if HSRING_KERNELS_ON
    const auto t = x.scalar_type();
    return x.is_cuda() && x.dim() == 3 && x.size(2) % 2 == 0 && kernel_call::supported(t) &&
           rope.cos.device() == x.device() && rope.sin.device() == x.device() && rope.cos.scalar_type() == t &&
           rope.sin.scalar_type() == t && rope.cos.dim() == 2 && rope.cos.sizes() == rope.sin.sizes() &&
           rope.cos.size(0) == x.size(0) && rope.cos.size(1) == x.size(2) && rope.cos.stride(1) == 1 &&
           rope.sin.stride(1) == 1 && rope.cos.stride(0) == rope.sin.stride(0) && !rope.cos.requires_grad() &&
           !rope.sin.requires_grad();
#else
    (void)x;
    (void)rope;
    return false;
#endif
}

at::Tensor fused_rope(const at::Tensor& x, const RopeTables& rope) {
    HSRING_ASSERT(fused_rope_applies(x, rope), "fused rope called on tensors it does not take");
#if HSRING_KERNELS_ON
    return RopeFunction::apply(x, rope.cos, rope.sin);
#else
    return {};
#endif
}

} // namespace hsring::model
