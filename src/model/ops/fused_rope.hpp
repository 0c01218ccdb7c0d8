#pragma once
// apply_rope on the GPU in one kernel per direction (src/kernels/rope.hpp), as an autograd
// function: forward x*cos + rotate_half(x)*sin, backward its transpose on the gradient. Saves
// only the tables (which every layer shares anyway), not x. Replaces ~5 ATen kernels forward and
// ~8 backward per rotated tensor (~13 ms of a 312 ms drafter step on the H200).
#include "model/ops/ops.hpp"

#include <ATen/core/Tensor.h>

namespace hsring::model {

// Whether fused_rope can take x and these tables: a build with src/kernels, CUDA tensors of one
// floating dtype, x [T, heads, d] with its last dim contiguous, tables [T, d].
bool fused_rope_applies(const at::Tensor& x, const RopeTables& rope);

// x [T, heads, head_dim] rotated by its row's position (fused_rope_applies(x, rope) must hold).
at::Tensor fused_rope(const at::Tensor& x, const RopeTables& rope);

} // namespace hsring::model
