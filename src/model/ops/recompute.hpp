#pragma once
// Activation checkpointing (LibTorch C++ has no torch.utils.checkpoint): y = fn(inputs) keeps
// none of fn's intermediate activations, only its inputs; backward runs fn again on them under
// grad mode and back-propagates through that second graph. Exact when fn is deterministic and
// draws no random numbers (the DFlash layers: no dropout).
//
// Every tensor fn reads that needs a gradient must be in `inputs` (parameters included): their
// gradients come back through this node like any other op's, so gradient hooks (the gang's
// bucketed all-reduce) and accumulation behave as without recomputation. Tensors that need no
// gradient (RoPE tables, masks) may be captured by fn; fn must keep them alive itself.
#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace hsring::model {

using RecomputedFn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

// fn(inputs), recomputed in backward. Without grad mode or without any input needing a gradient
// it is a plain call.
at::Tensor recompute_in_backward(RecomputedFn fn, const std::vector<at::Tensor>& inputs);

} // namespace hsring::model
