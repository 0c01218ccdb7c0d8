#pragma once
// FusedAdamW against what the drafter ran before it: gradients divided by the step's weight,
// torch::nn::utils::clip_grad_norm_, torch::optim::AdamW::step. Shared by the CPU suite
// (test_adamw.cpp) and the GPU suite (test_gpu.cpp).
#include "model/ops/fused_adamw.hpp"

#include <doctest/doctest.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <vector>

namespace hsring::test {

// ||a - b|| / ||b|| (a moment's entries can cancel to near zero: no element-wise ratio).
inline double rel_diff(const at::Tensor& a, const at::Tensor& b) {
    at::Tensor x = a.to(at::kCPU, at::kDouble), y = b.to(at::kCPU, at::kDouble);
    return (x - y).norm().item<double>() / y.norm().item<double>();
}

// Two copies of one parameter set take `steps` steps on the same gradients, one through
// FusedAdamW, one through the reference; every step's norm and the final weights, moments and
// step counts must agree to fp32 rounding. `clip` is chosen by the caller to clip in some steps
// and not in others.
inline void check_fused_adamw_matches_reference(at::Device device, double clip, int steps) {
    at::manual_seed(3);
    const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
    std::vector<at::Tensor> a, b;
    for (auto shape : std::vector<std::vector<std::int64_t>>{{64, 48}, {48}, {3, 5, 7}, {1}}) {
        at::Tensor p = at::randn(shape, f32);
        a.push_back(p.clone().set_requires_grad(true));
        b.push_back(p.clone().set_requires_grad(true));
    }
    auto options = [] {
        return torch::optim::AdamWOptions(3e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1);
    };
    torch::optim::AdamW opt_a(a, options()), opt_b(b, options());
    model::FusedAdamW fused(opt_a);
    int clipped = 0, unclipped = 0;
    for (int s = 0; s < steps; ++s) {
        INFO("step " << s);
        const double divisor = 1.0 + s;  // the step's loss weight
        // Divided gradients' norm ~57 x 0.3 (1 + s): a clip of 40 binds from the third step on.
        for (std::size_t i = 0; i < a.size(); ++i) {
            at::Tensor g = at::randn(a[i].sizes(), f32) * (0.3 * (1 + s) * divisor);
            a[i].mutable_grad() = g.clone();
            b[i].mutable_grad() = g.clone();
        }
        if (s == 1) a[3].mutable_grad() = b[3].mutable_grad() = at::Tensor();  // no gradient: skipped
        // A changed lr reaches the step (the schedule sets the group's lr).
        for (auto* opt : {&opt_a, &opt_b})
            static_cast<torch::optim::AdamWOptions&>(opt->param_groups().front().options()).lr(3e-2 / (1 + s));
        const at::Tensor norm = fused.step(divisor, clip);
        double ref_norm = 0;
        {
            torch::NoGradGuard ng;
            for (auto& p : b)
                if (p.grad().defined()) p.grad().div_(divisor);
            ref_norm = torch::nn::utils::clip_grad_norm_(b, clip > 0 ? clip : 1e30);
            opt_b.step();
        }
        CHECK(norm.device() == a[0].device());
        CHECK(norm.item<double>() == doctest::Approx(ref_norm).epsilon(1e-5));
        (clip > 0 && ref_norm > clip ? clipped : unclipped) += 1;
        opt_a.zero_grad();
        opt_b.zero_grad();
    }
    CHECK(unclipped > 0);
    CHECK(clipped == (clip > 0 ? steps - unclipped : 0));
    if (clip > 0) CHECK(clipped > 0);
    for (std::size_t i = 0; i < a.size(); ++i) {
        INFO("parameter " << i);
        CHECK(rel_diff(a[i].detach(), b[i].detach()) < 1e-6);
        const auto& sa = static_cast<torch::optim::AdamWParamState&>(*opt_a.state().at(a[i].unsafeGetTensorImpl()));
        const auto& sb = static_cast<torch::optim::AdamWParamState&>(*opt_b.state().at(b[i].unsafeGetTensorImpl()));
        CHECK(sa.step() == sb.step());
        CHECK(rel_diff(sa.exp_avg(), sb.exp_avg()) < 1e-6);
        CHECK(rel_diff(sa.exp_avg_sq(), sb.exp_avg_sq()) < 1e-6);
    }
    const auto& skipped = static_cast<torch::optim::AdamWParamState&>(*opt_a.state().at(a[3].unsafeGetTensorImpl()));
    CHECK(skipped.step() == steps - 1);
}

} // namespace hsring::test
