#pragma once
// The token -> expert dispatch a sparse MLP needs, whatever its router and experts are
// (moe_mlp.hpp: Qwen3-MoE, gpt_oss_mlp.hpp: gpt-oss): each token's k chosen experts run on only
// the tokens routed to them, and their outputs, scaled by the routing weights, are summed into the
// token's row expert by expert in ascending order (transformers' summation order). Never a dense
// pass over all experts.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>

namespace hsring::model {

// x [T, H]; top_experts [T, k] int64 and top_weights [T, k] (x's dtype): each token's choices.
// expert(e, rows) maps expert e's rows of x [n, H] to its outputs [n, H]. Returns [T, H].
// One device -> host copy (the rows per expert: the loop's bounds).
at::Tensor dispatch_experts(const at::Tensor& x, const at::Tensor& top_experts, const at::Tensor& top_weights,
                            std::int64_t experts, const std::function<at::Tensor(std::int64_t, const at::Tensor&)>& expert);

} // namespace hsring::model
