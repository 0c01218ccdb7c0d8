// The drafter's optimizer step (model/ops/fused_adamw.hpp) on the CPU: the same weights, moments and
// gradient norm as dividing, clip_grad_norm_ and torch::optim::AdamW; its state survives
// torch::save / torch::load (a checkpoint) and the resumed steps equal the uninterrupted ones; a
// non-finite gradient changes nothing.
#include "adamw_check.hpp"
#include "model/ops/fused_adamw.hpp"
#include "model_test_util.hpp"

#include <torch/serialize.h>

#include <cmath>
#include <limits>

using namespace hsring;

TEST_SUITE("adamw") {

TEST_CASE("fused AdamW with the divisor and the clip in its grad scale equals divide + clip_grad_norm_ + AdamW") {
    SUBCASE("the clip binds in the later steps") { test::check_fused_adamw_matches_reference(at::kCPU, 40.0, 6); }
    SUBCASE("no clip") { test::check_fused_adamw_matches_reference(at::kCPU, 0.0, 4); }
}

TEST_CASE("fused AdamW state through torch::save / torch::load: the resumed steps equal the uninterrupted ones") {
    test::TempDir tmp;
    at::manual_seed(5);
    auto make = [](const std::vector<at::Tensor>& init) {
        std::vector<at::Tensor> ps;
        for (const auto& p : init) ps.push_back(p.clone().set_requires_grad(true));
        return ps;
    };
    const std::vector<at::Tensor> init{at::randn({16, 8}), at::randn({8})};
    std::vector<std::vector<at::Tensor>> grads;
    for (int s = 0; s < 5; ++s) grads.push_back({at::randn({16, 8}), at::randn({8})});
    auto run = [&](std::vector<at::Tensor>& ps, torch::optim::AdamW& opt, int from, int to) {
        model::FusedAdamW fused(opt);
        for (int s = from; s < to; ++s) {
            for (std::size_t i = 0; i < ps.size(); ++i) ps[i].mutable_grad() = grads[s][i].clone();
            fused.step(2.0, 1.0);
            opt.zero_grad();
        }
    };
    const auto opts = torch::optim::AdamWOptions(1e-2).weight_decay(0.01);
    std::vector<at::Tensor> whole = make(init);
    torch::optim::AdamW opt_whole(whole, opts);
    run(whole, opt_whole, 0, 5);

    std::vector<at::Tensor> first = make(init);
    torch::optim::AdamW opt_first(first, opts);
    run(first, opt_first, 0, 3);
    const std::string file = (tmp.path() / "optimizer.pt").string();
    torch::save(opt_first, file);
    std::vector<at::Tensor> resumed;
    for (const auto& p : first) resumed.push_back(p.detach().clone().set_requires_grad(true));
    torch::optim::AdamW opt_resumed(resumed, opts);
    torch::load(opt_resumed, file);
    run(resumed, opt_resumed, 3, 5);

    for (std::size_t i = 0; i < whole.size(); ++i) {
        CHECK(at::equal(whole[i].detach(), resumed[i].detach()));
        const auto& st = static_cast<torch::optim::AdamWParamState&>(*opt_resumed.state().at(resumed[i].unsafeGetTensorImpl()));
        CHECK(st.step() == 5);
    }
}

TEST_CASE("a gradient with a NaN or an inf changes nothing: weights, moments and step counts stay") {
    at::manual_seed(9);
    std::vector<at::Tensor> ps{at::randn({16, 8}).set_requires_grad(true), at::randn({8}).set_requires_grad(true)};
    torch::optim::AdamW opt(ps, torch::optim::AdamWOptions(1e-2));
    model::FusedAdamW fused(opt);
    for (auto& p : ps) p.mutable_grad() = at::randn(p.sizes());
    REQUIRE(std::isfinite(fused.step(1.0, 1.0).item<double>()));  // one good step: state exists
    opt.zero_grad();
    std::vector<at::Tensor> weights, m, v;
    for (auto& p : ps) {
        weights.push_back(p.detach().clone());
        const auto& st = static_cast<torch::optim::AdamWParamState&>(*opt.state()[p.unsafeGetTensorImpl()]);
        m.push_back(st.exp_avg().clone());
        v.push_back(st.exp_avg_sq().clone());
    }
    for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
        for (auto& p : ps) p.mutable_grad() = at::randn(p.sizes());
        ps[1].mutable_grad()[3] = bad;
        CHECK_FALSE(std::isfinite(fused.step(1.0, 1.0).item<double>()));
        opt.zero_grad();
        for (std::size_t i = 0; i < ps.size(); ++i) {
            const auto& st = static_cast<torch::optim::AdamWParamState&>(*opt.state()[ps[i].unsafeGetTensorImpl()]);
            CHECK(at::equal(ps[i].detach(), weights[i]));
            CHECK(at::equal(st.exp_avg(), m[i]));
            CHECK(at::equal(st.exp_avg_sq(), v[i]));
            CHECK(st.step() == 1);
        }
    }
}

}
