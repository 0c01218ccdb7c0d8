// FP8 matmuls ([train] matmul = "fp8", src/model/ops/fp8_linear.hpp) on the CPU, where the products
// are emulated with the GPU path's quantisation: the forward and dX against an fp64 reference
// within what e4m3 rounding allows, dW in the compute dtype, zeros stay zeros, shapes _scaled_mm
// cannot take fall back to a plain linear, and a tiny drafter's loss and gradients with FP8 layers
// stay close to fp32 (also with recompute = layers, which must give the same numbers as keeping
// the activations).
//
// Tolerances: e4m3 keeps 3 mantissa bits, so rounding moves an element by up to 2^-4 of its
// value (~2.5-3.5% RMS for normal data); a dot product of independent terms keeps that relative
// error, and the product of two rounded operands adds both: ~4% for x @ w^T (limit 6%), the same
// for dX = (g sw) @ wq (limit 9%, as when g went through e5m2). dW = g^T @ x is not quantised: x's
// dtype's rounding only (limit 1%).
#include "dflash_fixture.hpp"
#include "model/drafter/dflash/eval.hpp"
#include "model/ops/fp8_linear.hpp"
#include "model/ops/ops.hpp"
#include "model_test_util.hpp"

using namespace hsring;
using namespace hsring::model;
using hsring::test::DFlashFixture;

namespace {

// ||a - ref|| / ||ref|| (Frobenius), in fp64.
double fp8_rel_err(const at::Tensor& a, const at::Tensor& ref) {
    const at::Tensor r = ref.to(at::kDouble);
    return (a.to(at::kDouble) - r).norm().item<double>() / r.norm().item<double>();
}

struct Grads {
    at::Tensor y, dx, dw;
};

// y = f(x, w), then backward of sum(y * g).
template <typename F>
Grads run(F&& f, const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& g) {
    at::Tensor x = x0.detach().clone().requires_grad_(true), w = w0.detach().clone().requires_grad_(true);
    at::Tensor y = f(x, w);
    (y * g.to(y.scalar_type())).sum().backward();
    return {y.detach(), x.grad(), w.grad()};
}

Grads reference(const at::Tensor& x, const at::Tensor& w, const at::Tensor& g) {
    return run([](const at::Tensor& a, const at::Tensor& b) { return at::linear(a, b); }, x.to(at::kDouble),
               w.to(at::kDouble), g.to(at::kDouble));
}

} // namespace

TEST_SUITE("fp8") {

TEST_CASE("fp8_linear: forward and dX within e4m3 rounding of fp64, dW in x's dtype, in the dtypes of x and w") {
    at::Generator gen = cpu_generator(21);
    // 50 rows: padded to 64 inside (rows need not be a multiple of 16).
    const at::Tensor x = at::randn({50, 64}, gen), w = at::randn({48, 64}, gen) * 0.02, g = at::randn({50, 48}, gen);
    const Grads ref = reference(x, w, g);
    for (const auto xdt : {at::kFloat, at::kBFloat16}) {
        INFO("x dtype " << test::dt(xdt));
        const Grads f = run([](const at::Tensor& a, const at::Tensor& b) { return fp8_linear(a, b); }, x.to(xdt), w, g);
        CHECK(test::dt(f.y.scalar_type()) == test::dt(xdt));
        CHECK(test::dt(f.dx.scalar_type()) == test::dt(xdt));
        CHECK(test::dt(f.dw.scalar_type()) == "Float");  // the fp32 master weight's gradient
        CHECK(f.y.sizes() == ref.y.sizes());
        const double ey = fp8_rel_err(f.y, ref.y), edx = fp8_rel_err(f.dx, ref.dx), edw = fp8_rel_err(f.dw, ref.dw);
        MESSAGE("relative error: y " << ey << ", dX " << edx << ", dW " << edw);
        CHECK(ey < 0.06);
        CHECK(edx < 0.09);
        CHECK(edw < 0.01);  // g^T @ x in x's dtype
        // Really quantized: an fp32/bf16 matmul would be far closer.
        CHECK(ey > 0.01);
        CHECK(edx > 0.01);
    }
}

TEST_CASE("fp8_linear: a tensor's scale follows its own magnitude (tiny and huge values keep their precision)") {
    at::Generator gen = cpu_generator(22);
    const at::Tensor x = at::randn({32, 64}, gen), w = at::randn({32, 64}, gen), g = at::randn({32, 32}, gen);
    for (const double s : {1e-6, 1e4}) {
        INFO("scale " << s);
        const Grads ref = reference(x * s, w / s, g * s);
        const Grads f =
            run([](const at::Tensor& a, const at::Tensor& b) { return fp8_linear(a, b); }, x * s, w / s, g * s);
        CHECK(fp8_rel_err(f.y, ref.y) < 0.06);
        CHECK(fp8_rel_err(f.dx, ref.dx) < 0.09);
        CHECK(fp8_rel_err(f.dw, ref.dw) < 0.09);
    }
}

TEST_CASE("fp8_linear: zero input, weight or gradient gives zeros, never NaN") {
    at::Generator gen = cpu_generator(23);
    const at::Tensor x = at::randn({16, 32}, gen), w = at::randn({16, 32}, gen);
    const auto fp8 = [](const at::Tensor& a, const at::Tensor& b) { return fp8_linear(a, b); };
    Grads f = run(fp8, at::zeros_like(x), w, at::randn({16, 16}, gen));
    CHECK(at::equal(f.y, at::zeros({16, 16})));
    CHECK(at::equal(f.dw, at::zeros_like(w)));
    CHECK(at::isfinite(f.dx).all().item<bool>());
    f = run(fp8, x, at::zeros_like(w), at::randn({16, 16}, gen));
    CHECK(at::equal(f.y, at::zeros({16, 16})));
    CHECK(at::equal(f.dx, at::zeros_like(x)));
    f = run(fp8, x, w, at::zeros({16, 16}));
    CHECK(at::equal(f.dx, at::zeros_like(x)));
    CHECK(at::equal(f.dw, at::zeros_like(w)));
}

TEST_CASE("fp8_linear: features that are not multiples of 16 fall back to the plain linear, exactly") {
    at::Generator gen = cpu_generator(24);
    CHECK(fp8_linear_supported(64, 48));
    CHECK_FALSE(fp8_linear_supported(24, 48));
    CHECK_FALSE(fp8_linear_supported(64, 40));
    for (const auto& [in, out] : {std::pair<std::int64_t, std::int64_t>{24, 48}, {64, 40}}) {
        INFO(in << " -> " << out);
        const at::Tensor x = at::randn({20, in}, gen), w = at::randn({out, in}, gen), g = at::randn({20, out}, gen);
        const Grads f = run([](const at::Tensor& a, const at::Tensor& b) { return fp8_linear(a, b); }, x, w, g);
        const Grads d = run([](const at::Tensor& a, const at::Tensor& b) { return dense(a, b); }, x, w, g);
        CHECK(at::equal(f.y, d.y));
        CHECK(at::equal(f.dx, d.dx));
        CHECK(at::equal(f.dw, d.dw));
    }
}

TEST_CASE("fp8_linears: one quantized input for several weights gives each fp8_linear's output and the summed dX") {
    at::Generator gen = cpu_generator(25);
    // A leading batch dim (reshaped to rows inside), and a weight that falls back (40 outputs).
    const at::Tensor x = at::randn({3, 7, 64}, gen);
    const std::vector<at::Tensor> w{at::randn({48, 64}, gen), at::randn({32, 64}, gen), at::randn({40, 64}, gen)};
    std::vector<at::Tensor> g;
    for (const auto& wi : w) g.push_back(at::randn({3, 7, wi.size(0)}, gen));
    auto grads = [&](bool together) {
        at::Tensor xl = x.clone().requires_grad_(true);
        std::vector<at::Tensor> wl;
        for (const auto& wi : w) wl.push_back(wi.clone().requires_grad_(true));
        std::vector<at::Tensor> ys;
        if (together) ys = fp8_linears(xl, wl);
        else
            for (const auto& wi : wl) ys.push_back(fp8_linear(xl, wi));
        at::Tensor loss = at::zeros({});
        for (std::size_t i = 0; i < ys.size(); ++i) loss = loss + (ys[i] * g[i]).sum();
        loss.backward();
        std::vector<at::Tensor> out{xl.grad()};
        for (std::size_t i = 0; i < ys.size(); ++i) {
            out.push_back(ys[i].detach());
            out.push_back(wl[i].grad());
        }
        return out;
    };
    const auto a = grads(true), b = grads(false);
    REQUIRE(a.size() == b.size());
    CHECK(at::allclose(a[0], b[0], 1e-5, 1e-5));  // dX: the same terms, summed in another order
    for (std::size_t i = 1; i < a.size(); ++i) {
        INFO("tensor " << i);
        CHECK(at::equal(a[i], b[i]));
    }
    CHECK(a[1].sizes() == at::IntArrayRef({3, 7, 48}));
}

TEST_CASE("a tiny drafter with FP8 layer matmuls: loss within 2% of fp32, gradients finite and close") {
    DFlashFixture f;
    at::Generator g = cpu_generator(11);
    auto blocks = sample_dflash_blocks(f.batch.tokens, f.batch.loss_mask, f.batch.cu_seqlens, 4, 511, 6, 7.0, g);
    REQUIRE(blocks.num_blocks() > 0);
    auto drafter = f.drafter();
    auto step = [&](bool fp8) {
        DFlashLossOptions opt;
        opt.chunk = 7;
        opt.attention.group_blocks = 2;
        opt.fp8_matmul = fp8;
        const auto r = test::loss_and_grads(drafter, f.head, f.batch, blocks, opt);
        return std::make_pair(r.loss, r.grads);
    };
    const auto [loss32, g32] = step(false);
    const auto [loss8, g8] = step(true);
    MESSAGE("loss fp32 " << loss32 << ", fp8 " << loss8);
    CHECK(loss8 != loss32);  // the layers really ran in FP8
    CHECK(loss8 == doctest::Approx(loss32).epsilon(0.02));
    const auto names = drafter->named_parameters().keys();
    double worst = 0;
    for (std::size_t i = 0; i < g32.size(); ++i) {
        const double e = fp8_rel_err(g8[i], g32[i]);
        INFO(names[i] << ": relative error " << e);
        worst = std::max(worst, e);
        CHECK(at::isfinite(g8[i]).all().item<bool>());
        CHECK(e < 0.25);
    }
    MESSAGE("largest relative error of a parameter's gradient: " << worst);
}

TEST_CASE("FP8 with recompute = layers: the loss and gradients of keeping the activations") {
    DFlashFixture f;
    at::Generator g = cpu_generator(12);
    auto blocks = sample_dflash_blocks(f.batch.tokens, f.batch.loss_mask, f.batch.cu_seqlens, 4, 511, 6, 7.0, g);
    auto drafter = f.drafter();
    auto step = [&](bool recompute) {
        DFlashLossOptions opt;
        opt.fp8_matmul = true;
        opt.recompute_layers = recompute;
        const auto r = test::loss_and_grads(drafter, f.head, f.batch, blocks, opt);
        return std::make_pair(r.loss_sum, r.grads);
    };
    const auto [loss_kept, kept] = step(false);
    const auto [loss_re, re] = step(true);
    CHECK(loss_re == doctest::Approx(loss_kept).epsilon(1e-12));
    for (std::size_t i = 0; i < kept.size(); ++i) {
        INFO("param " << i);
        const double scale = kept[i].abs().max().item<double>();
        CHECK(at::allclose(re[i], kept[i], 1e-5, 1e-6 * scale));
    }
}

TEST_CASE("evaluation ignores fp8_matmul: it scores the drafter in the compute dtype, as inference runs it") {
    DFlashFixture f;
    auto drafter = f.drafter();
    DFlashLossOptions opt;
    opt.num_anchors = 4;
    const auto plain = evaluate_dflash(drafter, f.head, f.batch, {0, 1, 2}, 5, opt);
    opt.fp8_matmul = true;
    const auto fp8 = evaluate_dflash(drafter, f.head, f.batch, {0, 1, 2}, 5, opt);
    REQUIRE(plain.num_blocks > 0);
    CHECK(fp8.loss_sum == plain.loss_sum);
    CHECK(fp8.correct == plain.correct);
}

} // TEST_SUITE
