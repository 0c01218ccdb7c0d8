#include "model/fp8_weights.hpp"

#include "hsring/error.hpp"
#include "model/fp8_format.hpp"
#include "model/fp8_linear.hpp"
#include "model/kernel_call.hpp"
#include "model/safetensors.hpp"
#if HSRING_KERNELS_ON
#include "kernels/fp8_rows.hpp"
#endif

#include <ATen/ATen.h>

#include <cmath>

namespace hsring::model {
namespace {

using fp8::kE4M3Max;
using fp8::kMinAmax;

// The ATen composition of quantize_rows_into (the CPU's path, the GPU kernel's reference).
at::Tensor quantize_rows_aten(const at::Tensor& t, at::Tensor out) {
    const at::Tensor amax =
        at::linalg_vector_norm(t, INFINITY, at::IntArrayRef{1}, /*keepdim=*/true).to(at::kFloat).clamp_min_(kMinAmax);
    at::mul_out(out, t, amax.reciprocal().mul_(kE4M3Max));
    return amax.div_(kE4M3Max);
}

// Rows of t quantised to e4m3 into `out` (same shape, FP8): one pass, the cast on the store.
// Returns the dequantisation scales [rows, 1] fp32 (row ~ out_row * scale). t * (448 / amax) is
// at most 448 up to one fp32 rounding, far below e4m3fn's NaN (>= 464 rounds to it): nothing
// saturates and nothing turns NaN.
at::Tensor quantize_rows_into(const at::Tensor& t, at::Tensor out) {
#if HSRING_KERNELS_ON
    // On the GPU one kernel does the same arithmetic in two reads of t (src/kernels/fp8_rows.hpp).
    if (t.is_cuda() && kernel_call::supported(t.scalar_type()) && t.stride(1) == 1 && out.is_contiguous()) {
        at::Tensor scale = at::empty({t.size(0), 1}, t.options().dtype(at::kFloat));
        kernels::QuantizeRowsFp8Args a;
        a.input = t.data_ptr();
        a.rows = t.size(0);
        a.cols = t.size(1);
        a.row_stride = t.stride(0);
        a.output = static_cast<std::uint8_t*>(out.data_ptr());
        a.scale = scale.data_ptr<float>();
        a.dtype = kernel_call::dtype(t.scalar_type());
        a.stream = kernel_call::stream(t);
        kernel_call::check(kernels::quantize_rows_fp8(a), "quantize_rows_fp8 [{}, {}]", a.rows, a.cols);
        return scale;
    }
#endif
    return quantize_rows_aten(t, out);
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

Fp8Rows fp8_rows(const at::Tensor& x) {
    HSRING_ASSERT(x.dim() == 2, "fp8_rows: a 2-D input, got {}", shape_str(x.sizes()));
    const std::int64_t rows = x.size(0), pad = x.is_cuda() ? fp8::padded_rows(rows) - rows : 0;
    Fp8Rows q;
    q.rows = rows;
    q.data = at::empty({rows + pad, x.size(1)}, x.options().dtype(at::kFloat8_e4m3fn));
    q.scale = quantize_rows_into(x, q.data.narrow(0, 0, rows));
    if (pad > 0) {  // zero rows with scale 1: their products are zeros, cut off by fp8_dense
        q.data.narrow(0, rows, pad).zero_();
        q.scale = at::cat({q.scale, at::ones({pad, 1}, q.scale.options())});
    }
    return q;
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
