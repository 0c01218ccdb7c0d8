#include "model/ops/fp8_linear.hpp"

#include "hsring/error.hpp"
#include "model/io/fp8_format.hpp"
#include "model/ops/fp8_weights.hpp"
#include "model/ops/ops.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>

namespace hsring::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using fp8::kAlign;

// inputs = [x [rows, in], w_0 [out_0, in], ...]; outputs y_i = x @ w_i^T in x's dtype.
struct Fp8LinearFunction : public torch::autograd::Function<Fp8LinearFunction> {
    static variable_list forward(AutogradContext* ctx, at::TensorList inputs) {
        const at::Tensor& x = inputs[0];
        const Fp8Rows xq = fp8_rows(x);  // once for every weight sharing x
        variable_list saved{x};
        variable_list out;
        for (std::size_t i = 1; i < inputs.size(); ++i) {
            const Fp8Weight wq = fp8_weight(inputs[i]);  // one scale per output row
            out.push_back(fp8_dense(xq, wq, x.scalar_type()));
            saved.push_back(wq.data);
            saved.push_back(wq.scale);
            ctx->saved_data["w_dtype" + std::to_string(i)] = static_cast<std::int64_t>(inputs[i].scalar_type());
        }
        ctx->save_for_backward(saved);
        return out;
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const variable_list s = ctx->get_saved_variables();
        const at::Tensor& x = s[0];
        const std::int64_t rows = x.size(0);
        const std::size_t n = grads.size();
        variable_list result(n + 1);
        at::Tensor dx;
        for (std::size_t i = 0; i < n; ++i) {
            const at::Tensor& wq = s[1 + 2 * i];
            const at::Tensor& sw = s[2 + 2 * i];
            // Unused outputs get zero gradients (materialized by autograd).
            const at::Tensor g = grads[i].reshape({rows, wq.size(0)});
            if (ctx->needs_input_grad(0)) {
                // dX = g @ W = (g diag(sw)) @ Wq: the weight's row scales move onto g's columns, so the
                // product takes Wq's bytes as they are (transposed: column-major) with unit scales,
                // and g sw is quantised per row like any activation (the product in the same pass).
                const Fp8Rows gq = fp8_rows(g, sw);
                const Fp8Weight wt{transposed_bytes(wq), at::ones({wq.size(1)}, sw.options())};
                at::Tensor d = fp8_dense(gq, wt, x.scalar_type());
                dx = dx.defined() ? dx.add_(d) : d;
            }
            if (ctx->needs_input_grad(1 + i)) {
                // dW = g^T @ x from the compute dtype's inputs. On the GPU written straight in the
                // weight's fp32 (cuBLAS accumulates in fp32 either way): no bf16 rounding of dW and no
                // cast pass over it.
                const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype" + std::to_string(i + 1)].toInt());
                const bool fp32_out = x.is_cuda() && w_dtype == at::kFloat &&
                                      (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf);
                result[1 + i] = fp32_out ? at::mm(g.t(), x, at::kFloat) : at::matmul(g.t(), x).to(w_dtype);
            }
        }
        if (dx.defined()) result[0] = dx;
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
