#pragma once
// A frozen model's linear layers in FP8 ([target] weights = "fp8"): each weight is e4m3 with one
// scale per output channel, fixed at load; each activation row (token) gets its own scale when it
// is multiplied:
//
//   load      wq[o, :] = e4m3(w[o, :] / sw[o])          sw[o] = amax |w[o, :]| / 448
//   forward   xq[t, :] = e4m3(x[t, :] / sx[t])          sx[t] = amax |x[t, :]| / 448
//             y[t, o]  = sum_i xq[t, i] wq[o, i] * sx[t] sw[o]     (at::_scaled_mm, rowwise scales)
//
// A checkpoint published in FP8 (e.g. Qwen3-8B-FP8: F8_E4M3 weights with `weight_scale_inv`, one
// fp32 scale per 128x128 block) is converted block scales -> row scales one tensor at a time on the
// device (the model never exists in bf16): w = wq_block * s_block is formed in fp32 for that
// tensor only, then quantised per row as above.
//
// On the GPU the product runs in _scaled_mm (sm89+, every dimension a multiple of 16: rows are
// padded inside the quantised copy). Elsewhere (the CPU, or a weight whose dims are not multiples
// of 16) it is emulated with the same quantisation and fp32 products, which is the reference the
// GPU test holds _scaled_mm to.
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace hsring::model {

struct Fp8Weight {
    at::Tensor data;   // [out, in] float8_e4m3fn, row-major
    at::Tensor scale;  // [out] float32: row o of the weight ~ data[o, :] * scale[o]
    bool defined() const { return data.defined(); }
};

// Row-wise quantisation of w [out, in] (any float dtype and device).
Fp8Weight fp8_weight(const at::Tensor& w);

// A checkpoint's block-scaled FP8 weight: data [out, in] float8_e4m3fn and scale_inv
// [ceil(out / block[0]), ceil(in / block[1])] fp32 (w = data * scale_inv of its block), converted
// to row scales on data's device. `where` names the tensor in errors.
Fp8Weight fp8_weight_from_blocks(const at::Tensor& data, const at::Tensor& scale_inv,
                                 const std::vector<std::int64_t>& block, const std::string& where);

// The same block-scaled weight dequantised to `dtype` ([target] weights = "bf16" from an FP8
// checkpoint).
at::Tensor dequantize_fp8_blocks(const at::Tensor& data, const at::Tensor& scale_inv,
                                 const std::vector<std::int64_t>& block, at::ScalarType dtype, const std::string& where);

// Weights stacked along their output rows (q|k|v, gate|up): one GEMM for each group.
Fp8Weight fp8_cat(const std::vector<Fp8Weight>& parts);

// The weight in `dtype` (data * scale): the bf16 model an FP8 one approximates.
at::Tensor dequantize(const Fp8Weight& w, at::ScalarType dtype);

// x [T, in] @ w^T -> [T, out] in x's dtype, x quantised per row (the products as described above).
at::Tensor fp8_dense(const at::Tensor& x, const Fp8Weight& w);

// Activation rows quantised once for several products: e4m3 with one scale per row; on the GPU
// padded with zero rows (scale 1) to what _scaled_mm takes. With col_scale [cols] (fp32) the rows
// of x diag(col_scale) are quantised, the products taken in fp32 in the same pass.
struct Fp8Rows {
    at::Tensor data;        // [padded rows, cols] float8_e4m3fn
    at::Tensor scale;       // [padded rows, 1] float32
    std::int64_t rows = 0;  // the input's rows
    bool defined() const { return data.defined(); }
};
Fp8Rows fp8_rows(const at::Tensor& x, const at::Tensor& col_scale = {});

// Rows for a kernel that quantises as fp8_rows does and writes them itself (the cross-entropy's
// gradient, chunked_ce.cpp): data [rows (+ zero rows up to what _scaled_mm takes, on the GPU),
// cols] e4m3, scale [same, 1] fp32 all ones; the kernel fills the first `rows` of both.
Fp8Rows empty_fp8_rows(std::int64_t rows, std::int64_t cols, const at::Tensor& like);

// Rows quantised after what made them, in the same pass on the GPU (the intermediate never
// written in bf16; the frozen target's forward, no autograd). Elsewhere the ATen composition.
//   fp8_rms_norm_rows(x, w, eps)  = fp8_rows(rms_norm(x, w, eps))   x [rows, cols], w [cols]
//   fp8_swiglu_rows(gate_up)      = fp8_rows(swiglu(gate_up))        gate_up [rows, 2 * cols]
// (model/ops/ops.hpp), rounded where ATen rounds; the norm's mean summed in another order.
Fp8Rows fp8_rms_norm_rows(const at::Tensor& x, const at::Tensor& w, double eps);
Fp8Rows fp8_swiglu_rows(const at::Tensor& gate_up);

// A one-byte matrix [r, c] -> its transpose [c, r], contiguous: the e4m3 weight bytes fp8_linear's
// dX takes column-major (on the GPU one tiled kernel; elsewhere t().contiguous(), the same bytes).
at::Tensor transposed_bytes(const at::Tensor& data);

// xq @ w^T -> [rows, out] in `out` (bf16 for _scaled_mm on the GPU; elsewhere, or for dims it
// does not take, emulated in fp32 and converted).
at::Tensor fp8_dense(const Fp8Rows& xq, const Fp8Weight& w, at::ScalarType out);

// The same product emulated in fp32 (what the CPU runs; the GPU test's reference).
at::Tensor fp8_dense_reference(const at::Tensor& x, const Fp8Weight& w);

// A frozen LM head W [vocab, hidden] for training's cross-entropy ([train] lm_head = "fp8"), both
// of its products quantised once:
//
//   logits  = h @ W^T      fp8_dense(h, logits)   W per vocabulary row
//   dL/dh   = g @ W        fp8_dense(g, grad)     W^T per hidden row; g (softmax - onehot) per row
//
// (W never changes, so a training step quantises only h and g.)
struct Fp8LmHead {
    Fp8Weight logits;  // W  [vocab, hidden]
    Fp8Weight grad;    // W^T [hidden, vocab]
    bool defined() const { return logits.defined(); }
};
Fp8LmHead fp8_lm_head(const at::Tensor& lm_head);

} // namespace hsring::model
