#include "model/fp8_linear.hpp"

#include "hsring/error.hpp"
#include "model/fp8_format.hpp"
#include "model/ops.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>

namespace hsring::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using fp8::kAlign;
using fp8::kE4M3Max;
using fp8::kE5M2Max;
using fp8::kMinAmax;

struct Quantized {
    at::Tensor data;       // [padded rows, cols] FP8, rows past the input's are zero
    at::Tensor inv_scale;  // fp32 scalar: data * inv_scale ~ the input
};

// Tensorwise dynamic scaling: the scale is the largest power of two that keeps amax(|t|) within
// the format's largest finite value. A power of two is exact in every float format: t * scale is
// exact (also in bf16, where the multiply runs in t's dtype) and only the cast to FP8 rounds, and
// inv_scale is exactly its inverse. Nothing saturates: |t * scale| <= fmax (up to a rounding of
// log2, far below where e4m3 rounds to NaN or e5m2 to inf).
Quantized quantize(const at::Tensor& t, std::int64_t rows_to, at::ScalarType fp8, double fmax) {
    HSRING_ASSERT(t.dim() == 2 && rows_to >= t.size(0));
    const at::Tensor amax = at::linalg_vector_norm(t, INFINITY).to(at::kFloat).clamp_min_(kMinAmax);
    const at::Tensor scale = amax.reciprocal().mul_(fmax).log2_().floor_().exp2_();
    Quantized q;
    q.data = at::empty({rows_to, t.size(1)}, t.options().dtype(fp8));
    at::Tensor rows = q.data.narrow(0, 0, t.size(0));
    at::mul_out(rows, t, scale);  // one pass, cast to FP8 on the store
    if (rows_to > t.size(0)) q.data.narrow(0, t.size(0), rows_to - t.size(0)).zero_();
    q.inv_scale = scale.reciprocal();
    return q;
}

// a @ b with a row-major and b column-major FP8 (what _scaled_mm requires), in `out`.
at::Tensor scaled_mm(const at::Tensor& a, const at::Tensor& a_inv, const at::Tensor& b, const at::Tensor& b_inv,
                     at::ScalarType out, bool fast_accum) {
    return at::_scaled_mm(a, b, a_inv, b_inv, std::nullopt, std::nullopt, out, fast_accum);
}

// inputs = [x [rows, in], w_0 [out_0, in], ...]; outputs y_i = x @ w_i^T in x's dtype.
struct Fp8LinearFunction : public torch::autograd::Function<Fp8LinearFunction> {
    static variable_list forward(AutogradContext* ctx, at::TensorList inputs) {
        const at::Tensor& x = inputs[0];
        const std::int64_t rows = x.size(0), rows_p = fp8::padded_rows(rows);
        const Quantized xq = quantize(x, rows_p, at::kFloat8_e4m3fn, kE4M3Max);
        variable_list saved{xq.data, xq.inv_scale};
        variable_list out;
        for (std::size_t i = 1; i < inputs.size(); ++i) {
            const Quantized wq = quantize(inputs[i], inputs[i].size(0), at::kFloat8_e4m3fn, kE4M3Max);
            // wq [out, in] row-major is wq^T [in, out] column-major. Fast accumulation in the
            // forward product only, as torchao's default (the gradients' products accumulate in full).
            at::Tensor y = scaled_mm(xq.data, xq.inv_scale, wq.data.t(), wq.inv_scale, x.scalar_type(), true);
            out.push_back(rows_p == rows ? y : y.narrow(0, 0, rows));
            saved.push_back(wq.data);
            saved.push_back(wq.inv_scale);
            ctx->saved_data["w_dtype" + std::to_string(i)] = static_cast<std::int64_t>(inputs[i].scalar_type());
        }
        ctx->save_for_backward(saved);
        ctx->saved_data["rows"] = rows;
        ctx->saved_data["x_dtype"] = static_cast<std::int64_t>(x.scalar_type());
        return out;
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const variable_list s = ctx->get_saved_variables();
        const at::Tensor& xq = s[0];
        const at::Tensor& x_inv = s[1];
        const std::int64_t rows = ctx->saved_data["rows"].toInt(), rows_p = xq.size(0);
        const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
        const std::size_t n = grads.size();
        variable_list result(n + 1);
        at::Tensor dx, xq_cm;  // xq as a column-major [rows_p, in] (a transposed copy), for every dW
        for (std::size_t i = 0; i < n; ++i) {
            const at::Tensor& wq = s[2 + 2 * i];
            const at::Tensor& w_inv = s[3 + 2 * i];
            // Unused outputs get zero gradients (materialized by autograd): quantized, they stay zero.
            const Quantized gq = quantize(grads[i].reshape({rows, wq.size(0)}), rows_p, at::kFloat8_e5m2, kE5M2Max);
            if (ctx->needs_input_grad(0)) {
                // dX = g @ w: [rows_p, out] x [out, in], w needed column-major: a transposed copy.
                at::Tensor d = scaled_mm(gq.data, gq.inv_scale, wq.t().contiguous().t(), w_inv, x_dtype, false);
                dx = dx.defined() ? dx.add_(d) : d;
            }
            if (ctx->needs_input_grad(1 + i)) {
                // dW = g^T @ x: [out, rows_p] x [rows_p, in]; the zero pad rows add nothing.
                if (!xq_cm.defined()) xq_cm = xq.t().contiguous().t();
                const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype" + std::to_string(i + 1)].toInt());
                result[1 + i] =
                    scaled_mm(gq.data.t().contiguous(), gq.inv_scale, xq_cm, x_inv, x_dtype, false).to(w_dtype);
            }
        }
        if (dx.defined()) result[0] = rows_p == rows ? dx : dx.narrow(0, 0, rows);
        return result;
    }
};

} // namespace

bool fp8_linear_supported(std::int64_t in_features, std::int64_t out_features) {
    return in_features > 0 && out_features > 0 && in_features % kAlign == 0 && out_features % kAlign == 0;
}

std::vector<at::Tensor> fp8_linears(const at::Tensor& x, const std::vector<at::Tensor>& ws) {
    HSRING_ASSERT(x.dim() >= 1 && !ws.empty());
    const std::int64_t in = x.size(-1);
    const at::Tensor x2 = x.reshape({-1, in});
    std::vector<at::Tensor> fp8_ws;
    for (const auto& w : ws) {
        HSRING_ASSERT(w.dim() == 2 && w.size(1) == in);
        if (fp8_linear_supported(in, w.size(0))) fp8_ws.push_back(w);
    }
    variable_list ys;
    if (!fp8_ws.empty() && x2.size(0) > 0) {
        variable_list inputs{x2};
        inputs.insert(inputs.end(), fp8_ws.begin(), fp8_ws.end());
        ys = Fp8LinearFunction::apply(at::TensorList(inputs));
    }
    std::vector<at::Tensor> out;
    std::size_t k = 0;
    for (const auto& w : ws) {
        const bool fp8 = !ys.empty() && fp8_linear_supported(in, w.size(0));
        at::Tensor y = fp8 ? ys[k++] : dense(x2, w);
        std::vector<std::int64_t> shape(x.sizes().begin(), x.sizes().end());
        shape.back() = w.size(0);
        out.push_back(y.view(shape));
    }
    return out;
}

at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& w) { return fp8_linears(x, {w})[0]; }

} // namespace hsring::model
