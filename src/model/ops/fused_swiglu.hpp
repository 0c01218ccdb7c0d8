#pragma once
// The drafter MLP's silu(gate) * up as one differentiable op: on the GPU one kernel forward and one
// backward (src/kernels/swiglu.hpp: the same roundings as ATen's silu, multiply and their
// autograd), autograd keeping gate and up only; elsewhere ATen's at::silu(gate) * up.
#include <ATen/core/Tensor.h>

namespace hsring::model {

// gate, up: the same shape and dtype.
at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up);

} // namespace hsring::model
