#include "model/ops/fp8_weights.hpp"

#include "hsring/error.hpp"
#include "model/io/fp8_format.hpp"
#include "model/ops/fp8_linear.hpp"
#include "model/ops/kernel_call.hpp"
#include "model/ops/ops.hpp"
#include "model/io/safetensors.hpp"
#if HSRING_KERNELS_ON
#include "kernels/fp8_rows.hpp"
#include "kernels/transpose_bytes.hpp"
#endif

#include <ATen/ATen.h>

#include <cmath>

namespace hsring::model {
namespace {

using fp8::kE4M3Max;
using fp8::kMinAmax;

// The ATen composition of quantize_rows_into (the CPU's path, the GPU kernel's reference).
at::Tensor quantize_rows_aten(const at::Tensor& t_in, at::Tensor out, const at::Tensor& col_scale) {
    const at::Tensor t = col_scale.defined() ? t_in.to(at::kFloat).mul(col_scale.to(t_in.device(), at::kFloat)) : t_in;
    const at::Tensor amax =
        at::linalg_vector_norm(t, INFINITY, at::IntArrayRef{1}, /*keepdim=*/true).to(at::kFloat).clamp_min_(kMinAmax);
    at::mul_out(out, t, amax.reciprocal().mul_(kE4M3Max));
    return amax.div_(kE4M3Max);
}

#if HSRING_KERNELS_ON
// Whether the row kernel (src/kernels/fp8_rows.hpp) takes t's rows.
bool kernel_takes(const at::Tensor& t) {
    return t.is_cuda() && t.dim() == 2 && kernel_call::supported(t.scalar_type()) && t.stride(1) == 1;
}

// The row kernel on t's rows (a: the prologue and its operands) into `out` [rows, a.cols]; returns
// the dequantisation scales [rows, 1] fp32.
at::Tensor run_row_kernel(kernels::QuantizeRowsFp8Args a, const at::Tensor& t, at::Tensor& out) {
    at::Tensor scale = at::empty({t.size(0), 1}, t.options().dtype(at::kFloat));
    a.input = t.data_ptr();
    a.rows = t.size(0);
    a.row_stride = t.stride(0);
    a.output = static_cast<std::uint8_t*>(out.data_ptr());
    a.scale = scale.data_ptr<float>();
    a.dtype = kernel_call::dtype(t.scalar_type());
    a.stream = kernel_call::stream(t);
    kernel_call::check(kernels::quantize_rows_fp8(a), "quantize_rows_fp8 [{}, {}]", a.rows, a.cols);
    return scale;
}
#endif

// Rows of t quantised to e4m3 into `out` (same shape, FP8): one pass, the cast on the store.
// Returns the dequantisation scales [rows, 1] fp32 (row ~ out_row * scale). t * (448 / amax) is
// at most 448 up to one fp32 rounding, far below e4m3fn's NaN (>= 464 rounds to it): nothing
// saturates and nothing turns NaN. With col_scale [cols] the rows of t diag(col_scale) (fp32
// products) are quantised instead.
at::Tensor quantize_rows_into(const at::Tensor& t, at::Tensor out, const at::Tensor& col_scale = {}) {
#if HSRING_KERNELS_ON
    // On the GPU one kernel does the same arithmetic in one or two reads of t (src/kernels/fp8_rows.hpp).
    const bool cols_ok = !col_scale.defined() || (col_scale.is_cuda() && col_scale.scalar_type() == at::kFloat &&
                                                  col_scale.is_contiguous() && col_scale.numel() == t.size(1));
    if (kernel_takes(t) && out.is_contiguous() && cols_ok) {
        kernels::QuantizeRowsFp8Args a;
        a.cols = t.size(1);
        a.col_scale = col_scale.defined() ? col_scale.data_ptr<float>() : nullptr;
        return run_row_kernel(a, t, out);
    }
#endif
    return quantize_rows_aten(t, out, col_scale);
}

// Fresh rows [rows (+ padding on the GPU), cols] for fp8_rows and its fused forms.
Fp8Rows empty_rows(std::int64_t rows, std::int64_t cols, const at::Tensor& like) {
    const std::int64_t pad = like.is_cuda() ? fp8::padded_rows(rows) - rows : 0;
    Fp8Rows q;
    q.rows = rows;
    q.data = at::empty({rows + pad, cols}, like.options().dtype(at::kFloat8_e4m3fn));
    return q;
}

// q.scale holds the input rows' scales: the padding rows become zeros with scale 1 (their
// products are zeros, cut off by fp8_dense).
void pad_rows(Fp8Rows& q) {
    const std::int64_t pad = q.data.size(0) - q.rows;
    if (pad == 0) return;
    q.data.narrow(0, q.rows, pad).zero_();
    q.scale = at::cat({q.scale, at::ones({pad, 1}, q.scale.options())});
}

bool scaled_mm_fits(const at::Tensor& x, const Fp8Weight& w) {
    return x.is_cuda() && w.data.is_cuda() && x.scalar_type() == at::kBFloat16 &&
           fp8_linear_supported(x.size(1), w.data.size(0));
}

void check_blocks(const at::Tensor& data, const at::Tensor& scale_inv, const std::vector<std::int64_t>& block,
                  const std::string& where) {
    if (data.scalar_type() != at::kFloat8_e4m3fn || data.dim() != 2)
        fail("{}: a block-scaled FP8 weight must be a 2-D F8_E4M3 tensor, got {} {}", where,
             c10::toString(data.scalar_type()), shape_str(data.sizes()));
    if (block.size() != 2 || block[0] <= 0 || block[1] <= 0)
        fail("{}: weight_block_size must be two positive numbers", where);
    const std::int64_t rows = (data.size(0) + block[0] - 1) / block[0], cols = (data.size(1) + block[1] - 1) / block[1];
    if (scale_inv.dim() != 2 || scale_inv.size(0) != rows || scale_inv.size(1) != cols)
        fail("{}_scale_inv: shape {}, expected [{}, {}] (one scale per {}x{} block of the {} weight)", where,
             shape_str(scale_inv.sizes()), rows, cols, block[0], block[1], shape_str(data.sizes()));
}

// data * scale_inv of its block, in fp32 on data's device.
at::Tensor blocks_to_float(const at::Tensor& data, const at::Tensor& scale_inv, const std::vector<std::int64_t>& block) {
    const at::Tensor s = scale_inv.to(data.device(), at::kFloat)
                             .repeat_interleave(block[0], 0)
                             .narrow(0, 0, data.size(0))
                             .repeat_interleave(block[1], 1)
                             .narrow(1, 0, data.size(1));
    return data.to(at::kFloat).mul_(s);
}

} // namespace

Fp8Weight fp8_weight(const at::Tensor& w) {
    HSRING_ASSERT(w.dim() == 2, "fp8_weight: a 2-D weight, got {}", shape_str(w.sizes()));
    Fp8Weight q;
    q.data = at::empty(w.sizes(), w.options().dtype(at::kFloat8_e4m3fn));
    q.scale = quantize_rows_into(w, q.data).view({-1});
    return q;
}

Fp8Weight fp8_weight_from_blocks(const at::Tensor& data, const at::Tensor& scale_inv,
                                 const std::vector<std::int64_t>& block, const std::string& where) {
    check_blocks(data, scale_inv, block, where);
    return fp8_weight(blocks_to_float(data, scale_inv, block));
}

at::Tensor dequantize_fp8_blocks(const at::Tensor& data, const at::Tensor& scale_inv,
                                 const std::vector<std::int64_t>& block, at::ScalarType dtype, const std::string& where) {
    check_blocks(data, scale_inv, block, where);
    return blocks_to_float(data, scale_inv, block).to(dtype);
}

Fp8Weight fp8_cat(const std::vector<Fp8Weight>& parts) {
    std::vector<at::Tensor> data, scale;
    for (const auto& p : parts) {
        data.push_back(p.data);
        scale.push_back(p.scale);
    }
    return {at::cat(data, 0), at::cat(scale, 0)};
}

at::Tensor dequantize(const Fp8Weight& w, at::ScalarType dtype) {
    return w.data.to(at::kFloat).mul_(w.scale.unsqueeze(1)).to(dtype);
}

Fp8Rows fp8_rows(const at::Tensor& x, const at::Tensor& col_scale) {
    HSRING_ASSERT(x.dim() == 2, "fp8_rows: a 2-D input, got {}", shape_str(x.sizes()));
    Fp8Rows q = empty_rows(x.size(0), x.size(1), x);
    q.scale = quantize_rows_into(x, q.data.narrow(0, 0, q.rows), col_scale);
    pad_rows(q);
    return q;
}

Fp8Rows empty_fp8_rows(std::int64_t rows, std::int64_t cols, const at::Tensor& like) {
    Fp8Rows q = empty_rows(rows, cols, like);
    q.scale = at::ones({q.data.size(0), 1}, like.options().dtype(at::kFloat));
    if (q.data.size(0) > rows) q.data.narrow(0, rows, q.data.size(0) - rows).zero_();
    return q;
}

Fp8Rows fp8_rms_norm_rows(const at::Tensor& x, const at::Tensor& w, double eps) {
    HSRING_ASSERT(x.dim() == 2 && w.dim() == 1 && w.size(0) == x.size(1), "fp8_rms_norm_rows: x {}, weight {}",
                  shape_str(x.sizes()), shape_str(w.sizes()));
#if HSRING_KERNELS_ON
    // One kernel: the norm's sum of squares, then the normed row's amax and its bytes, the normed
    // row never written in bf16 (src/kernels/fp8_rows.hpp, RmsNorm).
    if (kernel_takes(x) && w.device() == x.device()) {
        const at::Tensor wt = as_dtype_of(w, x).contiguous();
        Fp8Rows q = empty_rows(x.size(0), x.size(1), x);
        kernels::QuantizeRowsFp8Args a;
        a.cols = x.size(1);
        a.prologue = kernels::RowPrologue::RmsNorm;
        a.norm_weight = wt.data_ptr();
        a.eps = static_cast<float>(eps);
        at::Tensor out = q.data.narrow(0, 0, q.rows);
        q.scale = run_row_kernel(a, x, out);
        pad_rows(q);
        return q;
    }
#endif
    return fp8_rows(rms_norm(x, w, eps));
}

Fp8Rows fp8_swiglu_rows(const at::Tensor& gate_up) {
    HSRING_ASSERT(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0, "fp8_swiglu_rows: [rows, 2 * cols], got {}",
                  shape_str(gate_up.sizes()));
#if HSRING_KERNELS_ON
    // One kernel: silu(gate) * up per element as ATen rounds it, quantised (SwiGlu prologue).
    if (kernel_takes(gate_up)) {
        const std::int64_t cols = gate_up.size(1) / 2;
        Fp8Rows q = empty_rows(gate_up.size(0), cols, gate_up);
        kernels::QuantizeRowsFp8Args a;
        a.cols = cols;
        a.prologue = kernels::RowPrologue::SwiGlu;
        at::Tensor out = q.data.narrow(0, 0, q.rows);
        q.scale = run_row_kernel(a, gate_up, out);
        pad_rows(q);
        return q;
    }
#endif
    return fp8_rows(swiglu(gate_up));
}

at::Tensor transposed_bytes(const at::Tensor& data) {
    HSRING_ASSERT(data.dim() == 2 && data.element_size() == 1, "transposed_bytes: a 2-D one-byte tensor, got {} {}",
                  c10::toString(data.scalar_type()), shape_str(data.sizes()));
#if HSRING_KERNELS_ON
    // On the GPU 16 bytes per thread through shared-memory tiles (src/kernels/transpose_bytes.hpp).
    if (data.is_cuda() && data.is_contiguous() && data.size(0) % 16 == 0 && data.size(1) % 16 == 0) {
        at::Tensor out = at::empty({data.size(1), data.size(0)}, data.options());
        kernels::TransposeBytesArgs a;
        a.input = static_cast<const std::uint8_t*>(data.data_ptr());
        a.rows = data.size(0);
        a.cols = data.size(1);
        a.output = static_cast<std::uint8_t*>(out.data_ptr());
        a.stream = kernel_call::stream(data);
        kernel_call::check(kernels::transpose_bytes(a), "transpose_bytes [{}, {}]", a.rows, a.cols);
        return out;
    }
#endif
    return data.t().contiguous();
}

namespace {

// The product in fp32 from the same e4m3 values and scales (the CPU's path, the GPU's reference).
at::Tensor emulated_dense(const Fp8Rows& xq, const Fp8Weight& w, at::ScalarType out) {
    at::Tensor y = at::matmul(xq.data.to(at::kFloat), w.data.to(at::kFloat).t());
    y = y.mul_(xq.scale).mul_(w.scale.to(y.device()).unsqueeze(0)).to(out);
    return xq.rows == y.size(0) ? y : y.narrow(0, 0, xq.rows);
}

} // namespace

at::Tensor fp8_dense_reference(const at::Tensor& x, const Fp8Weight& w) {
    HSRING_ASSERT(x.dim() == 2 && x.size(1) == w.data.size(1));
    return emulated_dense(fp8_rows(x), w, x.scalar_type());
}

at::Tensor fp8_dense(const Fp8Rows& xq, const Fp8Weight& w, at::ScalarType out) {
    HSRING_ASSERT(xq.data.dim() == 2 && xq.data.size(1) == w.data.size(1), "fp8_dense: x {} for a weight {}",
                  shape_str(xq.data.sizes()), shape_str(w.data.sizes()));
    if (!xq.data.is_cuda() || !w.data.is_cuda() || out != at::kBFloat16 || xq.data.size(0) % fp8::kAlign != 0 ||
        !fp8_linear_supported(xq.data.size(1), w.data.size(0)))
        return emulated_dense(xq, w, out);
    // Row-wise scales: a [rows, 1] and b [1, out] fp32; b is the weight's transpose (column-major).
    const at::Tensor y = at::_scaled_mm(xq.data, w.data.t(), xq.scale, w.scale.view({1, -1}), std::nullopt,
                                        std::nullopt, out, /*use_fast_accum=*/false);
    return xq.rows == y.size(0) ? y : y.narrow(0, 0, xq.rows);
}

at::Tensor fp8_dense(const at::Tensor& x, const Fp8Weight& w) {
    HSRING_ASSERT(x.dim() == 2 && x.size(1) == w.data.size(1), "fp8_dense: x {} for a weight {}",
                  shape_str(x.sizes()), shape_str(w.data.sizes()));
    if (!scaled_mm_fits(x, w)) return fp8_dense_reference(x, w);
    return fp8_dense(fp8_rows(x), w, x.scalar_type());
}

Fp8LmHead fp8_lm_head(const at::Tensor& lm_head) {
    HSRING_ASSERT(lm_head.dim() == 2, "fp8_lm_head: a [vocab, hidden] head, got {}", shape_str(lm_head.sizes()));
    const at::NoGradGuard no_grad;
    return {fp8_weight(lm_head), fp8_weight(lm_head.t().contiguous())};
}

} // namespace hsring::model
