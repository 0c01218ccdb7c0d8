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

// The same with the experts' two projections as grouped GEMMs (ATen's _grouped_mm: one kernel per
// projection over the tokens sorted by expert, no host sync, no per-expert launches):
//   out[t] = sum over t's experts e, ascending: w[t, e] * (act(x[t] @ gate_up[e]^T + gate_up_bias[e]) @ down[e]^T + down_bias[e])
// gate_up [E, 2I, H], down [E, H, I] output-major in x's dtype; biases [E, 2I] / [E, H] or undefined.
// For CUDA bf16 (sm90+): each token's k outputs are gathered back and summed in ascending expert
// order without atomics, so the result is deterministic.
at::Tensor grouped_experts(const at::Tensor& x, const at::Tensor& top_experts, const at::Tensor& top_weights,
                           const at::Tensor& gate_up, const at::Tensor& gate_up_bias, const at::Tensor& down,
                           const at::Tensor& down_bias, const std::function<at::Tensor(const at::Tensor&)>& act);
// Whether grouped_experts runs on x's device and dtype (CUDA bf16 on compute capability >= 9.0).
bool grouped_experts_apply(const at::Tensor& x);

} // namespace hsring::model
