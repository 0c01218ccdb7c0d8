#pragma once
// SwiGLU, y = silu(g) * u, and its gradient, each one elementwise pass (src/kernels/swiglu.cu),
// rounded where ATen's at::silu(g) * u and its autograd round (T = the tensors' dtype, fp32 math):
//
//   forward   s = T(g / (1 + exp(-g)))                      y  = T(s * u)
//   backward  du = T(dy * s)     ds = T(dy * u)             dg = T(ds * sig * (1 + g * (1 - sig))),
//             sig = 1 / (1 + exp(-g))                            (ATen's silu_backward)
//
// ATen ran silu, a multiply, and in backward two multiplies and silu_backward: five kernels and 14
// tensor passes where these take 3 and 5 (the drafter's MLP at the peer's shape: 3.4 ms of a
// 120 ms step in the H200 trace), and autograd kept s as well as g and u.
// Plain CUDA C++: no torch types cross this header.
#include "kernels/kernel_types.hpp"

#include <cstdint>

namespace hsring::kernels {

struct SwiGluArgs {
    std::int64_t n = 0;               // elements of each tensor (all contiguous, the same length)
    const void* gate = nullptr;
    const void* up = nullptr;
    const void* grad_out = nullptr;   // backward only: dL/dy
    void* out = nullptr;              // forward: y
    void* grad_gate = nullptr;        // backward: dL/dg
    void* grad_up = nullptr;          // backward: dL/du
    Dtype dtype = Dtype::BFloat16;
    void* stream = nullptr;           // cudaStream_t
};

// Enqueue the forward (out) or the backward (grad_gate, grad_up) on args.stream
// (kernel_types.hpp: LaunchStatus says whose an error is).
LaunchStatus swiglu_forward(const SwiGluArgs& args);
LaunchStatus swiglu_backward(const SwiGluArgs& args);

} // namespace hsring::kernels
