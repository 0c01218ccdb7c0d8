// The target's linear layers in FP8 ([target] weights = "fp8", src/model/ops/fp8_weights.hpp) on the
// CPU, where the products are emulated with the GPU path's quantisation: row scales, per-token
// activation scales (a row's result does not depend on the other rows), block-scaled checkpoints
// (weight_scale_inv, config.json's weight_block_size) read exactly and converted to row scales,
// errors that name the file and tensor, and a tiny target's hidden states close to fp32.
//
// Tolerances: e4m3 keeps 3 mantissa bits (up to 2^-4 relative per element, ~2.5-3.5% RMS);
// x @ w^T with both operands rounded ~4% (limit 6%).
#include "hsring/error.hpp"
#include "model/ops/chunked_ce.hpp"
#include "model/ops/fp8_weights.hpp"
#include "model/target/target.hpp"
#include "model/ops/tensor_init.hpp"
#include "ce_reference.hpp"
#include "model_test_util.hpp"

#include <nlohmann/json.hpp>

#include <fstream>

using namespace hsring;
using namespace hsring::model;
using hsring::test::error_of;
using hsring::test::TempDir;

namespace {

double fp8w_rel_err(const at::Tensor& a, const at::Tensor& ref) {
    const at::Tensor r = ref.to(at::kDouble);
    return (a.to(at::kDouble) - r).norm().item<double>() / r.norm().item<double>();
}

// What a published FP8 checkpoint holds for w: e4m3 data with one fp32 scale per block
// (scale_inv = amax of the block / 448, data = w / scale_inv), as DeepSeek's / Qwen's FP8 weights.
std::pair<at::Tensor, at::Tensor> block_quantize(const at::Tensor& w, std::int64_t b0, std::int64_t b1) {
    const std::int64_t rows = (w.size(0) + b0 - 1) / b0, cols = (w.size(1) + b1 - 1) / b1;
    at::Tensor scale = at::empty({rows, cols}, at::kFloat), data = at::empty(w.sizes(), at::kFloat);
    for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) {
            at::Tensor blk = w.narrow(0, i * b0, std::min(b0, w.size(0) - i * b0)).narrow(1, j * b1, std::min(b1, w.size(1) - j * b1));
            const float s = std::max(blk.abs().max().item<float>(), 1e-12f) / 448.0f;
            scale[i][j] = s;
            data.narrow(0, i * b0, blk.size(0)).narrow(1, j * b1, blk.size(1)).copy_(blk / s);
        }
    return {data.to(at::kFloat8_e4m3fn), scale};
}

bool is_linear(const std::string& name) {
    for (const char* p : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "gate_proj.weight",
                          "up_proj.weight", "down_proj.weight"})
        if (name.ends_with(p)) return true;
    return false;
}

// A tiny model directory as a published FP8 checkpoint: every linear weight block-scaled (blocks
// of b x b, in config.json), the rest fp32. Returns the weights the checkpoint means (data * scale).
TensorMap save_fp8_checkpoint(const std::filesystem::path& dir, const ModelShape& s, const TensorMap& w, std::int64_t b) {
    TensorMap out, meant;
    for (const auto& [name, t] : w) {
        if (!is_linear(name)) {
            out[name] = meant[name] = t;
            continue;
        }
        auto [data, scale] = block_quantize(t, b, b);
        out[name] = data;
        out[name + "_scale_inv"] = scale;
        meant[name] = data.to(at::kFloat) * scale.repeat_interleave(b, 0).narrow(0, 0, t.size(0)).repeat_interleave(b, 1).narrow(1, 0, t.size(1));
    }
    save_hf_model_dir(dir, s, out);
    nlohmann::json j;
    std::ifstream(dir / "config.json") >> j;
    j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                {"weight_block_size", {b, b}}};
    std::ofstream(dir / "config.json") << j.dump(2);
    return meant;
}

std::vector<at::Tensor> hidden(TargetModel& m, const at::Tensor& tokens, const std::vector<std::int64_t>& cu,
                               const std::vector<int>& layers) {
    std::vector<at::Tensor> out(layers.size());
    m.forward(tokens, cu, layers, [&](std::size_t i, const at::Tensor& h) { out[i] = h.clone(); });
    return out;
}

} // namespace

TEST_SUITE("fp8") {

TEST_CASE("FP8 weights: one scale per output row, dequantised within e4m3's rounding; a zero row stays zero") {
    at::Generator g = hsring::model::cpu_generator(3);
    at::Tensor w = at::randn({96, 80}, g) * at::linspace(0.01, 10.0, 96).unsqueeze(1);  // rows of very different size
    w[5].zero_();
    const Fp8Weight q = fp8_weight(w);
    CHECK((q.data.scalar_type() == at::kFloat8_e4m3fn));
    CHECK((q.scale.sizes() == at::IntArrayRef{96}));
    const at::Tensor back = dequantize(q, at::kFloat);
    CHECK(at::isfinite(back).all().item<bool>());
    CHECK(back[5].abs().max().item<float>() == 0.0f);
    // Row scales: every row keeps e4m3's relative precision however small it is.
    for (std::int64_t r : {0, 1, 50, 95})
        if (r != 5) CHECK(fp8w_rel_err(back[r], w[r]) < 4e-2);
    // Each row's largest element maps to 448 (the scale uses the whole range).
    CHECK(q.data.to(at::kFloat).abs().amax(1)[0].item<float>() == 448.0f);
}

TEST_CASE("FP8 linear: per-token activation scales; x @ w^T within 6% of fp64, each row independent of the others") {
    at::Generator g = hsring::model::cpu_generator(4);
    const at::Tensor x = at::randn({37, 64}, g) * at::linspace(0.001, 100.0, 37).unsqueeze(1);
    const at::Tensor w = at::randn({48, 64}, g) * 0.02;
    const Fp8Weight q = fp8_weight(w);
    const at::Tensor y = fp8_dense(x, q);
    CHECK((y.sizes() == at::IntArrayRef{37, 48}));
    CHECK(fp8w_rel_err(y, at::matmul(x.to(at::kDouble), w.to(at::kDouble).t())) < 6e-2);
    // Per-token scales: the tiny first row is as precise as the large last one, and a row's result
    // is the same computed alone (batch-invariant: a sample's hidden states do not depend on its slot).
    CHECK(fp8w_rel_err(y[0], at::matmul(x[0].to(at::kDouble), w.to(at::kDouble).t())) < 6e-2);
    for (std::int64_t r : {0, 17, 36}) CHECK(fp8w_rel_err(fp8_dense(x.narrow(0, r, 1), q), y.narrow(0, r, 1)) < 1e-6);
    CHECK(at::equal(fp8_dense_reference(x, q), y));  // the CPU runs the reference itself
}

TEST_CASE("an FP8 LM head ([train] lm_head): the cross-entropy's loss and gradient within e4m3's rounding of fp64") {
    // Random head and rows as a drafter's: logits ~ N(0, 2^2), rows 0-3 confident (p_label ~ 1),
    // where the gradient row softmax - onehot is tiny and must keep its own scale.
    at::Generator g = hsring::model::cpu_generator(31);
    const std::int64_t n = 40, hdim = 64, v = 320;
    const at::Tensor w = at::randn({v, hdim}, g) * 0.25;
    const at::Tensor y = at::randint(v, {n}, g, at::kLong), wt = at::rand({n}, g) + 0.5;
    at::Tensor h0 = at::randn({n, hdim}, g);
    // x_label ~ 6 |w_label|^2 = 24, the others ~ N(0, 3^2): 1 - p_label ~ 1e-6
    for (std::int64_t i = 0; i < 4; ++i) h0[i] = w[y[i].item<std::int64_t>()] * 6.0;
    const Fp8LmHead q = fp8_lm_head(w);
    // Both products' weights quantised once: W per vocabulary row, W^T per hidden row.
    CHECK(at::equal(q.logits.data.to(at::kFloat), fp8_weight(w).data.to(at::kFloat)));
    CHECK(at::equal(q.grad.data.to(at::kFloat), fp8_weight(w.t().contiguous()).data.to(at::kFloat)));
    CHECK((q.grad.scale.sizes() == at::IntArrayRef{hdim}));

    at::Tensor h = h0.clone().requires_grad_(true);
    const ChunkedCE c = chunked_cross_entropy(h, w, y, wt, 16, &q);
    c.loss_sum.backward();
    // fp64 reference of the same loss and d(loss)/dh
    const test::CeReference exact = test::ce_reference_fp64(h0, w, y, wt);
    const double ref = exact.loss;
    const at::Tensor& gref = exact.grad;
    // Logits off by ~4% of their size (two e4m3 operands) move each -log p by ~0.1 here; the sum
    // of 40 of them by ~1%. The gradient rows: two e4m3 products, ~4-6%.
    CHECK(std::abs(c.loss_sum.item<double>() - ref) / ref < 3e-2);
    const at::Tensor rel = (h.grad().to(at::kDouble) - gref).norm(2, 1) / gref.norm(2, 1);
    INFO("gradient rows' relative errors " << rel);
    CHECK(rel.narrow(0, 4, n - 4).max().item<double>() < 0.15);
    // The confident rows: a gradient ~1e-5 of the others', as precise as theirs (g has a scale per row).
    CHECK(gref.narrow(0, 0, 4).norm(2, 1).max().item<double>() < 1e-3 * gref.narrow(0, 4, n - 4).norm(2, 1).min().item<double>());
    CHECK(rel.narrow(0, 0, 4).max().item<double>() < 0.15);
    CHECK(at::isfinite(h.grad()).all().item<bool>());
    // Without autograd (evaluation, no grad): the same loss and hits from the same FP8 logits.
    at::NoGradGuard no_grad;
    const ChunkedCE e = chunked_cross_entropy(h0, w, y, wt, 16, &q);
    CHECK(e.loss_sum.item<double>() == doctest::Approx(c.loss_sum.item<double>()).epsilon(1e-6));
    CHECK(at::equal(e.correct, c.correct));
}

TEST_CASE("FP8 rows with column scales quantise x diag(c): the product taken in fp32, the same as multiplying first") {
    at::Generator g = hsring::model::cpu_generator(5);
    const at::Tensor x = at::randn({20, 48}, g).to(at::kBFloat16);
    const at::Tensor c = at::rand({48}, g) * 1e-3 + 1e-6;
    const Fp8Rows a = fp8_rows(x, c), b = fp8_rows(x.to(at::kFloat) * c);
    CHECK(a.rows == 20);
    CHECK(at::equal(a.data.view(at::kByte), b.data.view(at::kByte)));
    CHECK(at::equal(a.scale, b.scale));
}

TEST_CASE("FP8 weights: q|k|v stacked keep each part's row scales") {
    at::Generator g = hsring::model::cpu_generator(5);
    const at::Tensor a = at::randn({32, 16}, g), b = at::randn({16, 16}, g) * 100;
    const Fp8Weight cat = fp8_cat({fp8_weight(a), fp8_weight(b)});
    CHECK(at::equal(dequantize(cat, at::kFloat), at::cat({dequantize(fp8_weight(a), at::kFloat),
                                                          dequantize(fp8_weight(b), at::kFloat)})));
}

TEST_CASE("a block-scaled FP8 checkpoint (weight_scale_inv, config's weight_block_size) loads as the weights it means") {
    const ModelShape s = preset_shape("tiny");
    const TensorMap w = random_target_weights(s, 6, at::kCPU, at::kFloat);
    TempDir dir;
    const TensorMap meant = save_fp8_checkpoint(dir.path(), s, w, 32);  // 64 x 192: blocks of 32, 2 x 6 of them
    const ModelShape parsed = resolve_model_shape(dir.path().string());
    const std::vector<std::int64_t> cu{0, 40, 97};
    const at::Tensor tokens = at::randint(s.vocab_size, {97}, hsring::model::cpu_generator(7), at::kLong);
    const std::vector<int> layers{1, 4, 7};
    // weights = "bf16": dequantised on load = the model of the weights the checkpoint means.
    auto exact = TargetModel::from_weights(s, meant, at::kCPU, at::kFloat, "meant");
    auto dequantised = TargetModel::load(parsed, at::kCPU, at::kFloat, 0);
    const auto ref = hidden(exact, tokens, cu, layers), got = hidden(dequantised, tokens, cu, layers);
    for (std::size_t i = 0; i < layers.size(); ++i) CHECK(fp8w_rel_err(got[i], ref[i]) < 1e-6);
    // weights = "fp8": block scales become row scales, activations quantised per token.
    auto fp8 = TargetModel::load(parsed, at::kCPU, at::kFloat, 0, /*fp8=*/true);
    const auto q = hidden(fp8, tokens, cu, layers);
    for (std::size_t i = 0; i < layers.size(); ++i) {
        INFO("layer " << layers[i]);
        CHECK(at::isfinite(q[i]).all().item<bool>());
        CHECK(fp8w_rel_err(q[i], ref[i]) < 8e-2);
    }
}

TEST_CASE("an FP8 checkpoint's errors name the file, the tensor and the fix") {
    const ModelShape s = preset_shape("tiny");
    const TensorMap w = random_target_weights(s, 8, at::kCPU, at::kFloat);
    TempDir dir;
    save_fp8_checkpoint(dir.path(), s, w, 32);
    const std::string file = (dir.path() / "model.safetensors").string();
    TensorMap ckpt = load_safetensors(dir.path());
    auto load_error = [&](const TensorMap& t, bool fp8) {
        save_safetensors(dir.path() / "model.safetensors", t, {{"format", "pt"}});
        return error_of([&] { TargetModel::load(resolve_model_shape(dir.path().string()), at::kCPU, at::kFloat, 0, fp8); });
    };
    TensorMap bad = ckpt;
    bad["model.layers.2.mlp.down_proj.weight_scale_inv"] = at::ones({3, 3});
    for (bool fp8 : {false, true}) {
        const std::string msg = load_error(bad, fp8);
        CHECK(msg.find(file) != std::string::npos);
        CHECK(msg.find("model.layers.2.mlp.down_proj.weight_scale_inv: shape [3, 3], expected [2, 6]") != std::string::npos);
    }
    bad = ckpt;
    bad.erase("model.layers.0.self_attn.o_proj.weight_scale_inv");
    const std::string msg = load_error(bad, false);
    CHECK(msg.find(file + ": model.layers.0.self_attn.o_proj.weight: an F8_E4M3 tensor without") != std::string::npos);
    CHECK(msg.find("per-tensor FP8 formats are not supported") != std::string::npos);
    save_safetensors(dir.path() / "model.safetensors", ckpt, {{"format", "pt"}});
    nlohmann::json j;
    std::ifstream(dir.path() / "config.json") >> j;
    j["quantization_config"]["weight_block_size"] = {128};
    std::ofstream(dir.path() / "config.json") << j.dump(2);
    CHECK(error_of([&] { TargetModel::load(resolve_model_shape(dir.path().string()), at::kCPU, at::kFloat, 0); })
              .find("quantization_config.weight_block_size must be two positive integers, got [128]") != std::string::npos);
}

TEST_CASE("a tiny target with FP8 linear weights: hidden states close to fp32 at every captured layer, logits too") {
    const ModelShape s = preset_shape("tiny");
    auto f32 = TargetModel::load(s, at::kCPU, at::kFloat, 9);
    auto fp8 = TargetModel::load(s, at::kCPU, at::kFloat, 9, /*fp8=*/true);
    const std::vector<std::int64_t> cu{0, 64, 65, 130};
    const at::Tensor tokens = at::randint(s.vocab_size, {130}, hsring::model::cpu_generator(10), at::kLong);
    const std::vector<int> layers{0, 3, 7};
    std::vector<at::Tensor> a(3), b(3);
    const at::Tensor la = f32.forward(tokens, cu, layers, [&](std::size_t i, const at::Tensor& h) { a[i] = h; }, true);
    const at::Tensor lb = fp8.forward(tokens, cu, layers, [&](std::size_t i, const at::Tensor& h) { b[i] = h; }, true);
    for (std::size_t i = 0; i < layers.size(); ++i) {
        INFO("layer " << layers[i] << ": " << fp8w_rel_err(b[i], a[i]));
        CHECK(fp8w_rel_err(b[i], a[i]) < 5e-2);
    }
    CHECK(fp8w_rel_err(lb, la) < 5e-2);
}

} // TEST_SUITE
