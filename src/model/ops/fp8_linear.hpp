#pragma once
// FP8 linear layers ([train] matmul = "fp8"): y = x @ w^T with the forward product and the input's
// gradient in FP8 on the tensor cores, differentiable (a custom autograd function), with the row
// scales of fp8_weights.hpp (one per token, one per output row of the weight):
//
//   forward   xq = e4m3(x / sx[t]), wq = e4m3(w / sw[o])    y  = (xq @ wq^T) sx sw       (each step's w)
//   backward  gs = g diag(sw), gq = e4m3(gs / sg[t])        dX = (gq @ wq) sg            (wq as saved)
//                                                           dW = g^T @ x from x's dtype
//
// Moving sw onto g's columns lets dX use the forward's e4m3 weight bytes (transposed) with unit
// scales instead of quantising w^T again (the transpose: one tiled kernel on the GPU). dW takes
// bf16 operands (on the GPU written in the weight's fp32 by the GEMM itself): the weights' own
// update keeps bf16's precision, and its operands need no transposed FP8 copies. The products run in
// at::_scaled_mm with row-wise scales, bf16 out (on the CPU, and for shapes it does not take,
// emulated in fp32 with the same quantisation: fp8_weights.hpp). Kept for backward: x (as the
// compute-dtype path keeps it) and the weight's e4m3 copy with its scales (1 B per parameter, where
// the compute-dtype path keeps a 2 B cast).
//
// Shapes: _scaled_mm wants every matrix dimension a multiple of 16. Rows (tokens) are padded to a
// multiple of 16 with zero rows inside the quantized copy and the output is a view of the real
// rows; a weight whose in or out features are not multiples of 16 runs as a plain linear in x's
// dtype (ops.hpp's dense).
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
