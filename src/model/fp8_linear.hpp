#pragma once
// FP8 linear layers ([train] matmul = "fp8"): y = x @ w^T with both operands quantized to FP8 in
// forward and backward, differentiable (a custom autograd function), in the spirit of torchao's
// Float8Linear with dynamic tensorwise scaling:
//
//   forward   xq = e4m3(x * sx), wq = e4m3(w * sw)    y  = xq @ wq^T / (sx sw)
//   backward  gq = e5m2(g * sg)                        dX = gq @ wq / (sg sw), dW = gq^T @ xq / (sg sx)
//
// with s = the largest power of two that keeps s * amax(|t|) <= 448 (e4m3) or 57344 (e5m2), one
// per tensor, computed on the device (no host sync). The products run in at::_scaled_mm with the
// output in x's dtype (bf16 on CUDA; fp32 on the CPU, where _scaled_mm emulates FP8), so the
// result has e4m3's precision (~2^-4 relative per element) and dW, dX in x's dtype; dW is then
// cast to w's dtype (the fp32 master weight), as the bf16 path's weight cast does.
// For backward only the FP8 copies and their scales are kept (half the bytes of bf16 inputs).
//
// Shapes: _scaled_mm wants every matrix dimension a multiple of 16. Rows (tokens) are padded to
// a multiple of 16 with zero rows inside the quantized copy (free: they are written there
// anyway) and the output is a view of the real rows; a weight whose in or out features are not
// multiples of 16 runs as a plain linear in x's dtype (ops.hpp's dense).
#include <ATen/core/Tensor.h>

#include <vector>

namespace hsring::model {

// x [.., in] @ w^T for w [out, in] (any float dtypes; the result is in x's dtype).
at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& w);

// x @ w_i^T for every w_i sharing x (q/k/v, gate/up): x is quantized and kept once.
std::vector<at::Tensor> fp8_linears(const at::Tensor& x, const std::vector<at::Tensor>& ws);

// Whether fp8_linear runs [.., in] x [out, in] in FP8 (else it falls back to a plain linear).
bool fp8_linear_supported(std::int64_t in_features, std::int64_t out_features);

} // namespace hsring::model
