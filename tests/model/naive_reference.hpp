#pragma once
// An independent, deliberately naive Qwen3/Qwen3-MoE/Llama forward for the tests: fp64, one
// sequence and one attention head at a time, separate q/k/v/gate/up projections, RoPE and the
// Llama-3 frequency scaling written out from their definitions, an explicit causal mask, a
// sparse MLP token by token and expert by expert. Shares no code with src/model.
#include "hsring/model_shape.hpp"
#include "model/io/safetensors.hpp"

#include <ATen/core/Tensor.h>

#include <vector>

namespace hsring::test {

struct NaiveOutput {
    std::vector<at::Tensor> layers;  // [k] = output of decoder layer k, [T, H] fp64 (last: final-normed)
    at::Tensor logits;               // [T, vocab] fp64
};

NaiveOutput naive_forward(const ModelShape& shape, const model::TensorMap& weights,
                          const std::vector<std::vector<std::int64_t>>& sequences);

} // namespace hsring::test
