// GPU paths (exit 77 without a CUDA device unless HSRING_GPU_TESTS=required): the varlen flash
// target forward against the fp32 path, random init reproducible on the device, and the bf16
// drafter step against the fp32 CPU step on the same weights and blocks, FP8 matmuls (_scaled_mm on
// the tensor cores) against fp64 and the bf16 drafter step, the fused AdamW step against torch's,
// the fused RoPE and cross-entropy kernels against fp64, the fused SwiGLU against ATen, the block attention's masks built on the
// GPU against the CPU's.
#include "adamw_check.hpp"
#include "ce_reference.hpp"
#include "dflash_fixture.hpp"
#include "model/ops/attention.hpp"
#include "model/ops/chunked_ce.hpp"
#include "model/decode/decode_graphs.hpp"
#include "model/drafter/dflash/drafter.hpp"
#include "model/decode/generate.hpp"
#include "model/target/kv_cache.hpp"
#include "model/decode/spec_decode.hpp"
#include "model/drafter/registry/registry.hpp"
#include "model/ops/expert_dispatch.hpp"
#include "model/ops/fp8_linear.hpp"
#include "model/ops/fp8_weights.hpp"
#include "model/ops/fused_swiglu.hpp"
#include "model/ops/fused_rope.hpp"
#include "model/target/gpt_oss_mlp.hpp"
#include "model/ops/ops.hpp"
#include "model/ops/sink_attention.hpp"
#include "model/target/target.hpp"
#include "model_test_util.hpp"

#include <torch/cuda.h>
#include <torch/optim/adamw.h>

using namespace hsring;
using namespace hsring::model;

namespace {

const at::Device kGpu("cuda:0");

double gpu_rel_err(const at::Tensor& a, const at::Tensor& ref) {
    at::Tensor r = ref.to(at::kCPU, at::kDouble);
    return (a.to(at::kCPU, at::kDouble) - r).norm().item<double>() / r.norm().item<double>();
}

} // namespace

TEST_SUITE("gpu") {

TEST_CASE("FP8 target weights: _scaled_mm with row scales equals its emulation; Qwen3-8B dims close to bf16") {
    test::require_gpu_or_skip();
    // 1000 rows (padded to 1008 inside), rows of very different size: per-token scales.
    const at::Tensor x = (at::randn({1000, 4096}, at::TensorOptions().device(kGpu)) *
                          at::linspace(0.01, 50.0, 1000, at::TensorOptions().device(kGpu)).unsqueeze(1))
                             .to(at::kBFloat16);
    const at::Tensor w = (at::randn({6144, 4096}, at::TensorOptions().device(kGpu)) * 0.02).to(at::kBFloat16);
    const Fp8Weight q = fp8_weight(w);
    const at::Tensor y = fp8_dense(x, q);
    CHECK((y.sizes() == at::IntArrayRef{1000, 6144}));
    CHECK((y.scalar_type() == at::kBFloat16));
    CHECK(gpu_rel_err(y, fp8_dense_reference(x, q)) < 1e-2);     // the same products, other summation order
    CHECK(gpu_rel_err(y, at::matmul(x.to(at::kFloat), w.to(at::kFloat).t())) < 6e-2);  // e4m3 x e4m3
    CHECK(gpu_rel_err(y.narrow(0, 0, 1), at::matmul(x.narrow(0, 0, 1).to(at::kFloat), w.to(at::kFloat).t())) < 6e-2);
    // The row quantisation kernel (src/kernels/fp8_rows.cu) against the CPU's ATen composition:
    // the same IEEE operations, so the same bytes and scales. A zero row and a strided input too.
    at::Tensor xs = x.narrow(1, 3, 4000);  // row stride 4096, starts 6 bytes in: the kernel's scalar path
    xs[3].zero_();
    for (const at::Tensor& in : {x, xs}) {
        const Fp8Weight g = fp8_weight(in), c = fp8_weight(in.cpu());
        const std::int64_t differ =
            g.data.cpu().view(at::kByte).ne(c.data.view(at::kByte)).sum().item<std::int64_t>();
        MESSAGE("quantised bytes differing GPU kernel vs CPU ATen: " << differ << " of " << c.data.numel());
        CHECK(differ == 0);
        CHECK(at::equal(g.scale.cpu(), c.scale));
        // With column scales (fp8_linear's dX: g diag(sw)), the fp32 products in the same pass.
        const at::Tensor cs = at::rand({in.size(1)}, at::TensorOptions().device(kGpu)) * 1e-3 + 1e-5;
        const Fp8Rows gc = fp8_rows(in, cs), cc = fp8_rows(in.cpu(), cs.cpu());
        CHECK(gc.data.size(0) % 16 == 0);  // padded on the GPU
        const std::int64_t differ_cols =
            gc.data.narrow(0, 0, gc.rows).cpu().view(at::kByte).ne(cc.data.view(at::kByte)).sum().item<std::int64_t>();
        MESSAGE("with column scales: " << differ_cols << " bytes differing");
        CHECK(differ_cols == 0);
        CHECK(at::equal(gc.scale.narrow(0, 0, gc.rows).cpu(), cc.scale));
    }
    // The target's fused forms: RMSNorm, or SwiGLU, and the quantisation in one kernel, against the
    // ATen composition on the same device (the norm's mean sums in another order: a rounding apart).
    {
        auto dequant = [](const Fp8Rows& q) {
            return q.data.narrow(0, 0, q.rows).to(at::kFloat).mul(q.scale.narrow(0, 0, q.rows));
        };
        auto compare = [&](const char* what, const Fp8Rows& fused, const Fp8Rows& aten, double max_differ) {
            CHECK(fused.rows == aten.rows);
            CHECK(fused.data.size(0) % 16 == 0);
            const double differ = fused.data.narrow(0, 0, fused.rows).view(at::kByte)
                                      .ne(aten.data.narrow(0, 0, aten.rows).view(at::kByte))
                                      .sum().item<double>() / double(aten.data.narrow(0, 0, aten.rows).numel());
            const double err = gpu_rel_err(dequant(fused), dequant(aten));
            MESSAGE(what << ": bytes differing from the ATen composition " << differ * 100 << "%, dequantised rel. err " << err);
            CHECK(differ <= max_differ);
            CHECK(err < 1e-2);
            CHECK(at::allclose(fused.scale.narrow(0, 0, fused.rows), aten.scale.narrow(0, 0, aten.rows), 1e-2, 0));
        };
        const at::Tensor nw = (1 + 0.1 * at::randn({4096}, at::TensorOptions().device(kGpu))).to(at::kBFloat16);
        compare("RMSNorm + quantisation", fp8_rms_norm_rows(x, nw, 1e-6), fp8_rows(rms_norm(x, nw, 1e-6)), 0.02);
        const at::Tensor gate_up = (at::randn({1000, 2 * 3072}, at::TensorOptions().device(kGpu)) * 3).to(at::kBFloat16);
        compare("SwiGLU + quantisation", fp8_swiglu_rows(gate_up), fp8_rows(swiglu(gate_up)), 1e-3);
        // A strided input (a view's rows) takes the same kernel.
        const at::Tensor wide = at::randn({64, 4096 + 64}, at::TensorOptions().device(kGpu)).to(at::kBFloat16);
        compare("RMSNorm + quantisation, strided rows", fp8_rms_norm_rows(wide.narrow(1, 0, 4096), nw, 1e-6),
                fp8_rows(rms_norm(wide.narrow(1, 0, 4096).contiguous(), nw, 1e-6)), 0.02);
    }
    // dX's column-major weight bytes: the tiled transpose kernel (src/kernels/transpose_bytes.cu)
    // against ATen's byte-wise one, at whole tiles, partial tiles and a shape it leaves to ATen.
    for (const auto& [r, c] : std::vector<std::pair<std::int64_t, std::int64_t>>{
             {6144, 4096}, {48, 80}, {1040, 4112}, {16, 12304}, {20, 36}}) {
        const at::Tensor bytes = at::randint(0, 256, {r, c}, at::TensorOptions().device(kGpu).dtype(at::kByte));
        const at::Tensor e4m3 = bytes.view(at::kFloat8_e4m3fn);
        const at::Tensor t = transposed_bytes(e4m3);
        CHECK((t.sizes() == at::IntArrayRef{c, r}));
        CHECK(t.is_contiguous());
        CHECK((t.scalar_type() == at::kFloat8_e4m3fn));
        CHECK(at::equal(t.view(at::kByte).cpu(), bytes.t().contiguous().cpu()));
    }
    CHECK(at::equal(transposed_bytes(q.data).view(at::kByte), q.data.t().contiguous().view(at::kByte)));
    // A model: Qwen3-8B dims, 3 layers; FP8 linear weights against the bf16 model of the same seed.
    ModelShape s = preset_shape("qwen3-8b");
    s.num_layers = 3;
    auto b16 = TargetModel::load(s, kGpu, at::kBFloat16, 7);
    auto f8 = TargetModel::load(s, kGpu, at::kBFloat16, 7, /*fp8=*/true);
    std::vector<std::int64_t> cu{0, 700, 701, 1900, 2048};
    at::Tensor tokens = at::randint(s.vocab_size, {cu.back()}, at::TensorOptions().dtype(at::kLong)).to(kGpu);
    std::vector<at::Tensor> a(2), b(2);
    b16.forward(tokens, cu, {0, 2}, [&](std::size_t i, const at::Tensor& h) { a[i] = h; });
    f8.forward(tokens, cu, {0, 2}, [&](std::size_t i, const at::Tensor& h) { b[i] = h; });
    // 12% and 19% on the H200 (layers 0 and 2): random-init weights amplify e4m3's 3.7% per GEMM
    // (the same layer emulated in fp32 on the CPU: 12.2% after layer 0, BENCHMARKS.md), so this
    // bounds a broken path (scales misapplied: ~100%), not FP8's precision.
    for (int i = 0; i < 2; ++i) {
        INFO("captured " << i << ": " << gpu_rel_err(b[i], a[i]));
        CHECK(at::isfinite(b[i]).all().item<bool>());
        CHECK(gpu_rel_err(b[i], a[i]) < 0.25);
    }
    // Per-token scales: a sequence's hidden states do not depend on what it is packed with.
    std::vector<at::Tensor> alone(1);
    f8.forward(tokens.narrow(0, 701, 1199), {0, 1199}, {2}, [&](std::size_t, const at::Tensor& h) { alone[0] = h; });
    CHECK(gpu_rel_err(b[1].narrow(0, 701, 1199), alone[0]) < 1e-2);
}

TEST_CASE("bf16 packed flash forward matches the fp32 forward (tiny and Qwen3-8B dims)") {
    test::require_gpu_or_skip();
    for (const char* preset : {"tiny", "qwen3-8b"}) {
        INFO(preset);
        ModelShape s = preset_shape(preset);
        s.num_layers = std::min<std::int64_t>(s.num_layers, 3);  // 8B dims, 3 layers: enough to compare
        auto f32 = TargetModel::load(s, kGpu, at::kFloat, 7);
        auto b16 = TargetModel::load(s, kGpu, at::kBFloat16, 7);
        std::vector<std::int64_t> cu{0, 700, 701, 1900, 2048};
        at::Tensor tokens = at::randint(s.vocab_size, {cu.back()}, at::TensorOptions().dtype(at::kLong)).to(kGpu);
        std::vector<at::Tensor> a(2), b(2);
        at::Tensor la = f32.forward(tokens, cu, {0, 2}, [&](std::size_t i, const at::Tensor& h) { a[i] = h; }, true);
        at::Tensor lb = b16.forward(tokens, cu, {0, 2}, [&](std::size_t i, const at::Tensor& h) { b[i] = h; }, true);
        CHECK(hsring::test::dt(b[1].scalar_type()) == "BFloat16");
        for (int i = 0; i < 2; ++i) CHECK(gpu_rel_err(b[i], a[i]) < 2e-2);
        CHECK(gpu_rel_err(lb, la) < 3e-2);
        // Packed equals alone on the flash path too.
        std::vector<at::Tensor> alone(1);
        b16.forward(tokens.narrow(0, 701, 1199), {0, 1199}, {2}, [&](std::size_t, const at::Tensor& h) { alone[0] = h; });
        CHECK(gpu_rel_err(b[1].narrow(0, 701, 1199), alone[0]) < 1e-2);
    }
}

// MoE targets: experts as grouped GEMMs (bf16) against the per-expert loop (fp32), gpt-oss's
// windowed flash attention with the sink correction against the exact path. The tiny presets are
// held to fp32; at the published dims (3 layers; gpt-oss-20b's window 128 < the 700- and 1,199-token
// sequences) a random-init MoE layer routes many tokens on near ties that bf16 flips (transformers'
// own Qwen3-MoE at 30B-A3B dims: 11% between bf16 and fp32 at layer 0), so there the forward must be
// finite and deterministic and its distance to fp32 is reported; the kernels themselves are held to
// the loop and the exact path on identical inputs below.
TEST_CASE("MoE targets in bf16 on the GPU (grouped-GEMM experts, flash + sinks) match the fp32 forward") {
    test::require_gpu_or_skip();
    for (const char* preset : {"tiny-moe", "tiny-gpt-oss", "qwen3-30b-a3b", "gpt-oss-20b"}) {
        INFO(preset);
        const bool tiny = std::string(preset).starts_with("tiny");
        ModelShape s = preset_shape(preset);
        s.num_layers = std::min<std::int64_t>(s.num_layers, 3);
        if (!s.layer_types.empty()) s.layer_types.resize(static_cast<std::size_t>(s.num_layers));
        auto f32 = TargetModel::load(s, kGpu, at::kFloat, 7);
        auto b16 = TargetModel::load(s, kGpu, at::kBFloat16, 7);
        std::vector<std::int64_t> cu{0, 700, 701, 1900, 2048};
        at::Tensor tokens = at::randint(s.vocab_size, {cu.back()}, at::TensorOptions().dtype(at::kLong)).to(kGpu);
        std::vector<at::Tensor> a(2), b(2), again(2);
        f32.forward(tokens, cu, {0, 2}, [&](std::size_t i, const at::Tensor& h) { a[i] = h; });
        b16.forward(tokens, cu, {0, 2}, [&](std::size_t i, const at::Tensor& h) { b[i] = h; });
        b16.forward(tokens, cu, {0, 2}, [&](std::size_t i, const at::Tensor& h) { again[i] = h; });
        for (int i = 0; i < 2; ++i) {
            MESSAGE(preset << " layer " << (i == 0 ? 0 : 2) << ": bf16 vs fp32 relative error " << gpu_rel_err(b[i], a[i]));
            CHECK(at::isfinite(b[i]).all().item<bool>());
            CHECK(at::equal(b[i], again[i]));  // grouped GEMMs and the gather back: no atomics
            if (tiny) CHECK(gpu_rel_err(b[i], a[i]) < 3e-2);
        }
    }
}

TEST_CASE("grouped_experts (CUDA bf16 _grouped_mm) equals the per-expert loop on the same bf16 weights") {
    test::require_gpu_or_skip();
    const auto bf = at::TensorOptions().device(kGpu).dtype(at::kBFloat16);
    const std::int64_t t = 3000, h = 2048, inter = 768, e = 128, k = 8;
    at::Tensor x = at::randn({t, h}, bf), gate_up = at::randn({e, 2 * inter, h}, bf) * 0.02,
               down = at::randn({e, h, inter}, bf) * 0.02, gub = at::randn({e, 2 * inter}, bf) * 0.1,
               db = at::randn({e, h}, bf) * 0.1;
    at::Tensor logits = at::randn({t, e}, bf);
    logits.narrow(1, 7, 1).add_(4.0);  // one popular expert, and (likely) some with no tokens
    logits.narrow(1, 100, 28).sub_(6.0);
    auto [w, idx] = at::softmax(logits, -1, at::kFloat).topk(k, -1);
    w = w.to(at::kBFloat16);
    auto act = [](const at::Tensor& y) { return swiglu(y); };
    REQUIRE(grouped_experts_apply(x));
    const at::Tensor grouped = grouped_experts(x, idx, w, gate_up, gub, down, db, act);
    const at::Tensor loop = dispatch_experts(x, idx, w, e, [&](std::int64_t i, const at::Tensor& rows) {
        return at::linear(act(at::linear(rows, gate_up[i], gub[i])), down[i], db[i]);
    });
    MESSAGE("grouped vs loop relative error " << gpu_rel_err(grouped, loop));
    CHECK(gpu_rel_err(grouped, loop) < 1e-2);
    CHECK(at::equal(grouped, grouped_experts(x, idx, w, gate_up, gub, down, db, act)));  // deterministic
}

TEST_CASE("gpt-oss's sparse MLP on the GPU (grouped GEMMs, interleaved clamped SwiGLU, biases) equals the loop") {
    test::require_gpu_or_skip();
    const auto bf = at::TensorOptions().device(kGpu).dtype(at::kBFloat16);
    const std::int64_t t = 2048, h = 2880, inter = 2880, e = 32;
    GptOssMoeWeights w{at::randn({e, h}, bf) * 0.05, at::randn({e}, bf) * 0.1, at::randn({e, 2 * inter, h}, bf) * 0.03,
                       at::randn({e, 2 * inter}, bf), at::randn({e, h, inter}, bf) * 0.02, at::randn({e, h}, bf) * 0.1};
    const at::Tensor x = at::randn({t, h}, bf);
    const GptOssRouting routing{4, 7.0, 1.702};
    REQUIRE(grouped_experts_apply(x));
    const at::Tensor grouped = gpt_oss_moe_mlp(x, w, routing);
    // The loop on the same bf16 weights: the CPU path's code run on the GPU (fp32 reference in bf16
    // rounding is what the CPU parity tests hold to transformers).
    auto [top_logits, idx] = at::linear(x, w.router, w.router_bias).topk(4, -1);
    const at::Tensor weights = at::softmax(top_logits, -1);
    const at::Tensor loop = dispatch_experts(x, idx, weights, e, [&](std::int64_t i, const at::Tensor& rows) {
        const at::Tensor gu = at::linear(rows, w.gate_up[i], w.gate_up_bias[i]);
        const at::Tensor gate = gu.slice(-1, 0, gu.size(-1), 2).clamp_max(7.0);
        const at::Tensor up = gu.slice(-1, 1, gu.size(-1), 2).clamp(-7.0, 7.0);
        return at::linear((up + 1) * (gate * at::sigmoid(gate * 1.702)), w.down[i], w.down_bias[i]);
    });
    MESSAGE("gpt-oss MLP grouped vs loop relative error " << gpu_rel_err(grouped, loop));
    CHECK(gpu_rel_err(grouped, loop) < 1e-2);
}

TEST_CASE("packed_sink_attention on the GPU (flash varlen window + sink from the log-sum-exp) equals the exact path") {
    test::require_gpu_or_skip();
    const auto bf = at::TensorOptions().device(kGpu).dtype(at::kBFloat16);
    const std::vector<std::int64_t> cu{0, 300, 301, 1000};
    const auto seqs = PackedSequences::make(cu, cu.back(), kGpu, "test");
    at::Tensor q = at::randn({1000, 64, 64}, bf), k = at::randn({1000, 8, 64}, bf), v = at::randn({1000, 8, 64}, bf);
    at::Tensor sinks = at::randn({64}, bf) * 2;
    for (std::int64_t window : {0, 128}) {
        INFO("window " << window);
        const at::Tensor fast = packed_sink_attention(q, k, v, sinks, seqs, window, 0.125);
        const at::Tensor exact = sink_attention(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), sinks.to(at::kFloat),
                                                cu, window, 0.125);
        MESSAGE("window " << window << ": flash + sink vs exact fp32 relative error " << gpu_rel_err(fast, exact));
        CHECK(gpu_rel_err(fast, exact) < 1e-2);
    }
}

TEST_CASE("random presets and the head are reproducible on the GPU") {
    test::require_gpu_or_skip();
    ModelShape s = preset_shape("tiny");
    auto m = TargetModel::load(s, kGpu, at::kBFloat16, 3);
    auto head = load_target_head(s, kGpu, at::kBFloat16, 3);
    CHECK(at::equal(m.head().embed, head.embed));
    CHECK(at::equal(m.head().lm_head, head.lm_head));
}

TEST_CASE("the bf16 GPU drafter step matches the fp32 CPU step on the same weights and blocks") {
    test::require_gpu_or_skip();
    test::DFlashFixture cpu(at::kCPU, {300, 41, 180}, 16);
    // The same target values on the GPU: move the CPU fixture's tensors.
    TargetHead head{cpu.head.embed.to(kGpu), cpu.head.lm_head.to(kGpu)};
    DFlashBatch batch{cpu.batch.hidden.to(kGpu), cpu.batch.tokens.to(kGpu), cpu.batch.loss_mask.to(kGpu),
                      cpu.batch.cu_seqlens};
    auto d_cpu = cpu.drafter(9);
    auto d_gpu = cpu.drafter(9);
    d_gpu->to(kGpu);
    at::Generator g = cpu_generator(5);
    auto blocks_cpu = sample_dflash_blocks(cpu.batch.tokens, cpu.batch.loss_mask, cpu.batch.cu_seqlens, 16, 511, 20,
                                           7.0, g);
    auto blocks_gpu = dflash_blocks_at(batch.tokens, batch.loss_mask, batch.cu_seqlens, 16, 511, blocks_cpu.anchors, 7.0);
    DFlashLossOptions opt;
    opt.chunk = 100;
    opt.attention.group_blocks = 8;
    auto rc = dflash_loss_for_blocks(d_cpu, cpu.head, cpu.batch, blocks_cpu, opt);
    auto rg = dflash_loss_for_blocks(d_gpu, head, batch, blocks_gpu, opt);
    CHECK(rg.loss.item<double>() == doctest::Approx(rc.loss.item<double>()).epsilon(2e-2));
    CHECK(at::equal(rg.counted.cpu(), rc.counted));
    rc.loss.backward();
    rg.loss.backward();
    auto pc = d_cpu->named_parameters(), pg = d_gpu->named_parameters();
    for (const auto& p : pc) {
        INFO(p.key());
        at::Tensor gc = p.value().grad().flatten().to(at::kDouble), gg = pg[p.key()].grad().cpu().flatten().to(at::kDouble);
        CHECK(hsring::test::dt(pg[p.key()].grad().scalar_type()) == "Float");  // fp32 master grads
        const double cos = (gc * gg).sum().item<double>() / (gc.norm() * gg.norm()).item<double>();
        CHECK(cos > 0.98);
    }
    // fp32 compute on the GPU agrees with the CPU closely (same math, other kernels).
    d_gpu->zero_grad();
    opt.compute_dtype = at::kFloat;
    auto rf = dflash_loss_for_blocks(d_gpu, head, batch, blocks_gpu, opt);
    CHECK(rf.loss.item<double>() == doctest::Approx(rc.loss.item<double>()).epsilon(1e-4));
    // And an optimizer step runs on the GPU.
    torch::optim::AdamW adam(d_gpu->parameters(), torch::optim::AdamWOptions(1e-3));
    rf.loss.backward();
    adam.step();
    torch::cuda::synchronize();
}

TEST_CASE("recompute = layers on the GPU (bf16): the loss and gradients of keeping the activations") {
    test::require_gpu_or_skip();
    test::DFlashFixture cpu(at::kCPU, {300, 41, 180}, 16);
    DFlashBatch batch{cpu.batch.hidden.to(kGpu), cpu.batch.tokens.to(kGpu), cpu.batch.loss_mask.to(kGpu),
                      cpu.batch.cu_seqlens};
    TargetHead head{cpu.head.embed.to(kGpu), cpu.head.lm_head.to(kGpu)};
    auto d = cpu.drafter(9);
    d->to(kGpu);
    at::Generator g = cpu_generator(5);
    auto blocks = sample_dflash_blocks(batch.tokens, batch.loss_mask, batch.cu_seqlens, 16, 511, 20, 7.0, g);
    auto run = [&](bool recompute) {
        DFlashLossOptions opt;
        opt.chunk = 100;
        opt.attention.group_blocks = 8;
        opt.recompute_layers = recompute;
        const auto r = test::loss_and_grads(d, head, batch, blocks, opt);
        return std::make_pair(r.loss_sum, r.grads);
    };
    const auto [loss_kept, kept] = run(false);
    const auto [loss_re, re] = run(true);
    // The forward is recomputed with the same kernels on the same inputs: the same loss; the
    // backward may sum in another order (atomics), so gradients agree to bf16 noise.
    CHECK(loss_re == doctest::Approx(loss_kept).epsilon(1e-6));
    for (std::size_t i = 0; i < kept.size(); ++i) {
        INFO("param " << i);
        const double cos = (kept[i] * re[i]).sum().item<double>() / (kept[i].norm() * re[i].norm()).item<double>();
        CHECK(cos > 0.9999);
    }
}

TEST_CASE("fp8_linear on the GPU (bf16 activations, fp32 weights) at Qwen3-8B shapes: within e4m3 rounding, dW from bf16 operands") {
    test::require_gpu_or_skip();
    // Rows not a multiple of 16 (padded inside); the tolerances of test_fp8.cpp.
    for (const auto& [rows, in, out] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{4100, 4096, 12288},
                                        {2050, 12288, 4096}, {100, 4096, 1024}}) {
        INFO(rows << " x " << in << " -> " << out);
        at::Tensor x = at::randn({rows, in}, at::TensorOptions().device(kGpu)).to(at::kBFloat16).requires_grad_(true);
        at::Tensor w = (at::randn({out, in}, at::TensorOptions().device(kGpu)) * 0.02).requires_grad_(true);
        at::Tensor g = at::randn({rows, out}, at::TensorOptions().device(kGpu)).to(at::kBFloat16);
        at::Tensor y = fp8_linear(x, w);
        (y * g).sum().backward();
        CHECK(hsring::test::dt(y.scalar_type()) == "BFloat16");
        CHECK(hsring::test::dt(x.grad().scalar_type()) == "BFloat16");
        CHECK(hsring::test::dt(w.grad().scalar_type()) == "Float");
        const at::Tensor xd = x.detach().to(at::kDouble), wd = w.detach().to(at::kDouble), gd = g.to(at::kDouble);
        const double ey = gpu_rel_err(y, at::linear(xd, wd)), edx = gpu_rel_err(x.grad(), gd.matmul(wd)),
                     edw = gpu_rel_err(w.grad(), gd.t().matmul(xd));
        MESSAGE("relative error: y " << ey << ", dX " << edx << ", dW " << edw);
        CHECK(ey < 0.06);
        CHECK(edx < 0.09);
        CHECK(edw < 0.01);  // g^T @ x from bf16 operands, fp32 out
    }
}

TEST_CASE("FP8 layer matmuls on the GPU: the tiny drafter's loss within 2% of bf16, gradients aligned") {
    test::require_gpu_or_skip();
    test::DFlashFixture cpu(at::kCPU, {300, 41, 180}, 16);
    DFlashBatch batch{cpu.batch.hidden.to(kGpu), cpu.batch.tokens.to(kGpu), cpu.batch.loss_mask.to(kGpu),
                      cpu.batch.cu_seqlens};
    TargetHead head{cpu.head.embed.to(kGpu), cpu.head.lm_head.to(kGpu)};
    auto d = cpu.drafter(9);
    d->to(kGpu);
    at::Generator g = cpu_generator(5);
    auto blocks = sample_dflash_blocks(batch.tokens, batch.loss_mask, batch.cu_seqlens, 16, 511, 20, 7.0, g);
    auto run = [&](bool fp8, bool recompute) {
        DFlashLossOptions opt;
        opt.chunk = 100;
        opt.attention.group_blocks = 8;
        opt.fp8_matmul = fp8;
        opt.recompute_layers = recompute;
        const auto r = test::loss_and_grads(d, head, batch, blocks, opt);
        return std::make_pair(r.loss, r.grads);  // gradient cosines: the scale of loss_sum cancels
    };
    const auto [loss16, g16] = run(false, false);
    const auto [loss8, g8] = run(true, false);
    const auto [loss8r, g8r] = run(true, true);
    MESSAGE("loss bf16 " << loss16 << ", fp8 " << loss8 << ", fp8 + recompute " << loss8r);
    CHECK(loss8 == doctest::Approx(loss16).epsilon(2e-2));
    CHECK(loss8r == doctest::Approx(loss8).epsilon(1e-6));
    for (std::size_t i = 0; i < g16.size(); ++i) {
        INFO("param " << i);
        CHECK(at::isfinite(g8[i]).all().item<bool>());
        const double cos = (g16[i] * g8[i]).sum().item<double>() / (g16[i].norm() * g8[i].norm()).item<double>();
        CHECK(cos > 0.95);
    }
}

TEST_CASE("fused AdamW on the GPU (multi-tensor kernel, divisor and clip as its grad scale) equals divide + clip + AdamW") {
    test::require_gpu_or_skip();
    test::check_fused_adamw_matches_reference(kGpu, 40.0, 6);
    test::check_fused_adamw_matches_reference(kGpu, 0.0, 3);
}

TEST_CASE("fused RoPE on the GPU equals the ATen composition, forward and backward, in every layout") {
    test::require_gpu_or_skip();
#if HSRING_HAVE_KERNELS
    struct Case {
        std::int64_t rows, heads, d;
        bool strided, misaligned;  // x a head slice of a wider tensor / starting one element late
    };
    const Case cases[] = {{3072, 32, 128, false, false}, {513, 8, 128, true, false}, {77, 4, 64, false, true},
                          {40, 3, 12, false, false}, {1, 1, 2, false, false}};
    at::Tensor inv = rope_inv_freq(128, 1e6, {});
    for (const auto& c : cases)
        for (at::ScalarType dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
            INFO(c.rows << " x " << c.heads << " x " << c.d << " strided " << c.strided << " misaligned "
                        << c.misaligned << " " << c10::toString(dt));
            at::Tensor positions = at::randint(40000, {c.rows}, at::TensorOptions().dtype(at::kLong)).to(kGpu);
            const RopeTables tab = rope_tables(inv.narrow(0, 0, c.d / 2).to(kGpu), positions, dt);
            const auto f = at::TensorOptions().device(kGpu);
            at::Tensor big = at::randn({c.rows, c.heads + (c.strided ? 5 : 0), c.d + (c.misaligned ? 1 : 0)}, f).to(dt);
            at::Tensor x = big.narrow(1, c.strided ? 2 : 0, c.heads).narrow(2, c.misaligned ? 1 : 0, c.d);
            REQUIRE(fused_rope_applies(x, tab));
            at::Tensor g = at::randn({c.rows, c.heads, c.d}, f).to(dt);
            at::Tensor xf = x.detach().clone().requires_grad_(true), xa = x.detach().to(at::kDouble).requires_grad_(true);
            at::Tensor y = apply_rope(xf, tab);  // the fused kernel
            const RopeTables tab64{tab.cos.to(at::kDouble), tab.sin.to(at::kDouble)};
            at::Tensor ref = apply_rope_aten(xa, tab64);
            (y * g).sum().backward();
            (ref * g.to(at::kDouble)).sum().backward();
            CHECK(hsring::test::dt(y.scalar_type()) == hsring::test::dt(dt));
            CHECK(hsring::test::dt(xf.grad().scalar_type()) == hsring::test::dt(dt));
            // fp32 math, one rounding to the dtype: within that dtype's rounding of the fp64 result.
            const double tol = dt == at::kFloat ? 1e-6 : dt == at::kHalf ? 2e-3 : 1e-2;
            CHECK(gpu_rel_err(y, ref) < tol);
            CHECK(gpu_rel_err(xf.grad(), xa.grad()) < tol);
            // And never further from fp64 than ATen's own composition in the same dtype.
            at::Tensor xb = x.detach().clone().requires_grad_(true);
            at::Tensor yb = apply_rope_aten(xb, tab);
            (yb * g).sum().backward();
            CHECK(gpu_rel_err(y, ref) <= gpu_rel_err(yb, ref) * 1.01 + 1e-7);
            CHECK(gpu_rel_err(xf.grad(), xa.grad()) <= gpu_rel_err(xb.grad(), xa.grad()) * 1.01 + 1e-7);
        }
#else
    MESSAGE("this build has no src/kernels (no nvcc): apply_rope runs the ATen composition on the GPU");
    CHECK_FALSE(fused_rope_applies(at::zeros({4, 2, 8}, at::TensorOptions().device(kGpu)),
                                   RopeTables{at::ones({4, 8}, at::TensorOptions().device(kGpu)),
                                              at::zeros({4, 8}, at::TensorOptions().device(kGpu))}));
#endif
}

TEST_CASE("chunked cross-entropy on the GPU (the cross_entropy_rows kernel): loss, accuracy and gradient against fp64") {
    test::require_gpu_or_skip();
    // As the CPU bf16 test: rows 0-3 confident (p_label ~ 1), where 1 - p rounded near 1 would
    // lose the gradient. Vocab 300 takes the kernel's scalar path, 4,096 and 151,936 its 16-byte one.
    for (const auto& [n, hdim, v] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{24, 64, 300}, {40, 64, 4096},
                                     {50, 4096, 151936}})
        for (at::ScalarType dt : {at::kBFloat16, at::kFloat}) {
            INFO(n << " rows, hidden " << hdim << ", vocab " << v << ", " << c10::toString(dt));
            at::Generator rg = cpu_generator(21);
            at::Tensor w = (at::randn({v, hdim}, rg) * (0.5 / std::sqrt(hdim / 64.0))).to(dt);
            at::Tensor y = at::randint(v, {n}, rg, at::kLong), wt = at::rand({n}, rg) + 0.5;
            at::Tensor h32 = at::randn({n, hdim}, rg) * (0.3 / std::sqrt(hdim / 64.0));
            // x_label ~ 4 |w_label|^2 = 64, the others ~ N(0, 8^2): p_label within 1e-6 of 1 even
            // against 151,936 others.
            for (std::int64_t i = 0; i < 4; ++i) h32[i] = w[y[i].item<std::int64_t>()].to(at::kFloat) * 4.0;
            at::Tensor h = h32.to(dt).to(kGpu).requires_grad_(true);
            const at::Tensor wg = w.to(kGpu), yg = y.to(kGpu), wtg = wt.to(kGpu);
            // One chunk: the kernel sees exactly the logits this GEMM gives, so the reference starts
            // from them.
            auto c = chunked_cross_entropy(h, wg, yg, wtg, 1000);
            c.loss_sum.backward();
            const at::Tensor logits = at::matmul(h.detach(), wg.t()).to(at::kCPU, at::kDouble);
            const at::Tensor logp = at::log_softmax(logits, 1);
            const at::Tensor wd = wt.to(at::kDouble);
            const double ref = (-logp.gather(1, y.unsqueeze(1)).squeeze(1) * wd).sum().item<double>();
            at::Tensor p = logp.exp();
            p.scatter_(1, y.unsqueeze(1), 0.0);
            p.scatter_(1, y.unsqueeze(1), -p.sum(1, true));
            const at::Tensor gref = (p * wd.unsqueeze(1)).matmul(w.to(at::kDouble));
            CHECK(c.loss_sum.item<double>() == doctest::Approx(ref).epsilon(1e-5));
            REQUIRE(logp.narrow(0, 0, 4).gather(1, y.narrow(0, 0, 4).unsqueeze(1)).exp().min().item<double>() > 0.999);
            const at::Tensor got = h.grad().to(at::kCPU, at::kDouble);
            const at::Tensor rel = (got - gref).norm(2, 1) / gref.norm(2, 1);
            INFO("relative row errors " << rel);
            CHECK(rel.max().item<double>() < (dt == at::kFloat ? 1e-4 : 1e-2));
            // Accuracy: a hit exactly where the label holds the row's max (the first one on ties).
            const at::Tensor correct = c.correct.cpu();
            const at::Tensor label_is_max = logits.gather(1, y.unsqueeze(1)).squeeze(1) == std::get<0>(logits.max(1));
            const at::Tensor cols = at::arange(v, at::TensorOptions().dtype(at::kLong)).unsqueeze(0);
            const at::Tensor first_max =
                std::get<0>(at::where(logits == std::get<0>(logits.max(1, true)), cols, v).min(1));
            CHECK(at::equal(correct, label_is_max & (first_max == y)));
            CHECK(correct.narrow(0, 0, 4).all().item<bool>());
            // Evaluation (no gradient): the same loss and hits.
            at::NoGradGuard no_grad;
            auto e = chunked_cross_entropy(h.detach(), wg, yg, wtg, 1000);
            CHECK(e.loss_sum.item<double>() == doctest::Approx(c.loss_sum.item<double>()).epsilon(1e-6));
            CHECK(at::equal(e.correct.cpu(), correct));
        }
}

TEST_CASE("an FP8 LM head on the GPU (_scaled_mm, the row-quantisation kernel) at Qwen3-8B's vocabulary: its emulation, fp64") {
    test::require_gpu_or_skip();
    // 64 rows against a [151,936 x 4096] head, as a drafter's output rows: bf16 on the GPU with
    // [train] lm_head = "fp8", the same head and rows through the CPU's fp32 emulation of the same
    // quantisation, and fp64 without FP8. Rows 0-3 confident (1 - p_label ~ 4e-4).
    const std::int64_t n = 64, hdim = 4096, v = 151936;
    at::Generator rg = cpu_generator(41);
    const at::Tensor w = (at::randn({v, hdim}, rg) * 0.02).to(at::kBFloat16);
    const at::Tensor y = at::randint(v, {n}, rg, at::kLong), wt = at::rand({n}, rg) + 0.5;
    at::Tensor h0 = at::randn({n, hdim}, rg) * 2.0;
    // x_label = 12 |w_label|^2 ~ 19.7, the others ~ N(0, 0.3^2): p_label ~ 0.9996 against 151,936
    for (std::int64_t i = 0; i < 4; ++i) h0[i] = w[y[i].item<std::int64_t>()].to(at::kFloat) * 12.0;
    h0 = h0.to(at::kBFloat16);
    const at::Tensor wg = w.to(kGpu), yg = y.to(kGpu), wtg = wt.to(kGpu);
    const Fp8LmHead qg = fp8_lm_head(wg);
    at::Tensor h = h0.to(kGpu).requires_grad_(true);
    const ChunkedCE c = chunked_cross_entropy(h, wg, yg, wtg, 1000, &qg);
    c.loss_sum.backward();
    // The emulation: the CPU's fp32 path with the same head quantised there (bit-identical bytes:
    // the GPU kernel is the CPU composition's arithmetic).
    const at::Tensor wf = w.to(at::kFloat);
    const Fp8LmHead qc = fp8_lm_head(wf);
    CHECK(at::equal(qg.logits.data.cpu().view(at::kByte), qc.logits.data.view(at::kByte)));
    CHECK(at::equal(qg.grad.scale.cpu(), qc.grad.scale));
    at::Tensor hc = h0.to(at::kFloat).requires_grad_(true);
    const ChunkedCE e = chunked_cross_entropy(hc, wf, y, wt, 1000, &qc);
    e.loss_sum.backward();
    // fp64, no FP8
    const test::CeReference exact = test::ce_reference_fp64(h0, w, y, wt);
    const double ref = exact.loss;
    const at::Tensor& gref = exact.grad;
    const at::Tensor& logp = exact.logp;
    REQUIRE(logp.narrow(0, 0, 4).gather(1, y.narrow(0, 0, 4).unsqueeze(1)).exp().min().item<double>() > 0.99);
    const double loss = c.loss_sum.item<double>(), emulated = e.loss_sum.item<double>();
    MESSAGE("loss: fp64 " << ref << ", FP8 on the GPU " << loss << ", FP8 emulated " << emulated);
    CHECK(std::isfinite(loss));
    // The GPU vs its emulation: bf16 logits and gradient rows vs fp32 ones (~0.1%).
    CHECK(std::abs(loss - emulated) / std::abs(emulated) < 5e-3);
    const at::Tensor got = h.grad().to(at::kCPU, at::kDouble);
    const at::Tensor vs_emulated = (got - hc.grad().to(at::kDouble)).norm(2, 1) / hc.grad().to(at::kDouble).norm(2, 1);
    const at::Tensor vs_exact = (got - gref).norm(2, 1) / gref.norm(2, 1);
    INFO("gradient rows' relative errors vs the emulation " << vs_emulated << " vs fp64 " << vs_exact);
    // Rows 0-3: their logits near 20 round in bf16 by up to 0.06, which moves every exp(x - max)
    // of the row by up to 6% against the emulation's fp32 logits (measured 2-6%); the others ~0.3%.
    CHECK(vs_emulated.narrow(0, 4, n - 4).max().item<double>() < 1e-2);
    CHECK(vs_emulated.narrow(0, 0, 4).max().item<double>() < 0.1);
    // vs fp64: e4m3 on both operands of both products (as the CPU test: loss 3%, gradient rows 15%).
    CHECK(std::abs(loss - ref) / ref < 3e-2);
    CHECK(vs_exact.max().item<double>() < 0.15);
}

TEST_CASE("fused SwiGLU on the GPU (one kernel each way) equals ATen's silu(gate) * up and its autograd") {
    test::require_gpu_or_skip();
    // bf16 and fp32; a shape of whole 16-byte packs and an odd one (the scalar path).
    for (at::ScalarType dt : {at::kBFloat16, at::kFloat})
        for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1000, 3072}, {7, 13}}) {
            INFO(c10::toString(dt) << " [" << rows << ", " << cols << "]");
            const auto opt = at::TensorOptions().device(kGpu);
            const at::Tensor g0 = (at::randn({rows, cols}, opt) * 3).to(dt), u0 = at::randn({rows, cols}, opt).to(dt);
            const at::Tensor dy = at::randn({rows, cols}, opt).to(dt);
            at::Tensor g1 = g0.clone().requires_grad_(true), u1 = u0.clone().requires_grad_(true);
            at::Tensor g2 = g0.clone().requires_grad_(true), u2 = u0.clone().requires_grad_(true);
            const at::Tensor fused = fused_swiglu(g1, u1), aten = at::silu(g2) * u2;
            (fused * dy).sum().backward();
            (aten * dy).sum().backward();
            auto differ = [](const at::Tensor& a, const at::Tensor& b) {
                return a.ne(b).sum().item<double>() / double(a.numel());
            };
            const double dy_differ = differ(fused, aten), dg_differ = differ(g1.grad(), g2.grad()),
                         du_differ = differ(u1.grad(), u2.grad());
            MESSAGE("elements differing from ATen: y " << dy_differ << ", dgate " << dg_differ << ", dup " << du_differ);
            CHECK(dy_differ == 0);   // the same IEEE operations
            CHECK(du_differ == 0);
            CHECK(dg_differ < 1e-3);  // silu_backward's fp32 expression: a contraction may differ by an ulp
            CHECK(gpu_rel_err(g1.grad(), g2.grad().to(at::kDouble)) < 1e-3);
        }
}

TEST_CASE("block attention plan on the GPU: the same masks, key gather and row places as on the CPU") {
    test::require_gpu_or_skip();
    // Two sequences (3,072 and 1,000 tokens), anchors sorted per sequence; layouts with groups of
    // 1 to 64 blocks and keys padded to 16 (odd key lengths take the scalar path in fp32) or 256.
    at::Generator rg = cpu_generator(4);
    std::vector<std::int64_t> anchors, seq_begin;
    for (const auto& [begin, len, count] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{0, 3072, 300}, {3072, 1000, 37}}) {
        at::Tensor a = std::get<0>(at::sort(at::randint(len - 16, {count}, rg, at::kLong)));
        for (std::int64_t i = 0; i < count; ++i) {
            anchors.push_back(begin + a[i].item<std::int64_t>());
            seq_begin.push_back(begin);
        }
    }
    for (const auto& [group, pad] : {std::pair<std::int64_t, std::int64_t>{32, 256}, {1, 16}, {64, 16}, {7, 256}})
        for (at::ScalarType dt : {at::kBFloat16, at::kFloat}) {
            INFO("groups of " << group << " blocks, keys padded to " << pad << ", " << c10::toString(dt));
            BlockAttentionLayout layout;
            layout.group_blocks = group;
            layout.key_pad = pad;
            const auto cpu = plan_block_attention(anchors, seq_begin, 16, 4072, layout, 4, at::kCPU, dt);
            const auto gpu = plan_block_attention(anchors, seq_begin, 16, 4072, layout, 4, kGpu, dt);
            REQUIRE(gpu.groups.size() == cpu.groups.size());
            CHECK(at::equal(gpu.key_index.cpu(), cpu.key_index));
            CHECK(at::equal(gpu.block_row_pos.cpu(), cpu.block_row_pos));
            CHECK(gpu.context_spans == cpu.context_spans);
            for (std::size_t i = 0; i < cpu.groups.size(); ++i) {
                INFO("group " << i);
                CHECK(gpu.groups[i].bias.sizes() == cpu.groups[i].bias.sizes());
                CHECK(at::equal(gpu.groups[i].bias.cpu(), cpu.groups[i].bias));
            }
        }
}

} // TEST_SUITE

TEST_SUITE("gpu") {

TEST_CASE("decode engine on the GPU: steps captured as CUDA graphs equal forward_cached; spec-decode and generate through them are lossless") {
    test::require_gpu_or_skip();
    auto m = TargetModel::load(preset_shape("tiny"), kGpu, at::kFloat, 12);
    const std::int64_t cap = 300;
    KVCache a(m.shape(), 1, cap, kGpu, at::kFloat), b(m.shape(), 1, cap, kGpu, at::kFloat);
    std::vector<std::int64_t> prompt;
    for (std::int64_t i = 0; i < 250; ++i) prompt.push_back((i * 37 + 5) % m.shape().vocab_size);
    m.forward_cached(at::tensor(prompt, at::kLong), {250}, a);
    m.forward_cached(at::tensor(prompt, at::kLong), {250}, b);
    DecodeGraphs engine(m, true, 256);
    REQUIRE(engine.captured());
    const std::vector<int> ids{1, 4};
    std::int64_t next = 9;
    // Windows 256 then 300 (= capacity) as the row grows past 256: two graphs per shape.
    for (int s = 0; s < 6; ++s)
        for (std::int64_t n : {1, 4}) {
            INFO("step " << s << ", n " << n << ", length " << a.length(0));
            std::vector<std::int64_t> tokens;
            for (std::int64_t i = 0; i < n; ++i) tokens.push_back(next++ % m.shape().vocab_size);
            std::vector<at::Tensor> want_l(2), got_l(2);
            const at::Tensor want = m.forward_cached(at::tensor(tokens, at::kLong), {n}, a, true, ids,
                                                     [&](std::size_t i, const at::Tensor& h) { want_l[i] = h.clone(); });
            const at::Tensor got = engine.step(tokens, n, b, ids, [&](std::size_t i, const at::Tensor& h) { got_l[i] = h.clone(); });
            CHECK(gpu_rel_err(got, want) < 1e-4);
            for (int i = 0; i < 2; ++i) CHECK(gpu_rel_err(got_l[i], want_l[i]) < 1e-4);
            CHECK(a.lengths() == b.lengths());
        }
    CHECK(engine.captured());  // nothing fell back
    CHECK(engine.graphs() == 4);

    // Greedy spec-decode and generate at batch 1 with graphs = without (fp32), and lossless.
    DFlashDrafter d(dflash_config_for(m.shape(), 1, 4, -1, {1, 4, 6}), 3, kGpu);
    d->eval();
    const std::vector<GenerateRequest> reqs{{std::vector<std::int64_t>(prompt.begin(), prompt.begin() + 40), 0},
                                            {{7, 8, 9}, 0}};
    GenerateOptions go;
    go.max_new_tokens = 30;
    go.batch = 1;
    SpecDecodeOptions so;
    so.max_new_tokens = 30;
    GenerateOptions ge = go;
    ge.decode_graphs = false;
    SpecDecodeOptions se = so;
    se.decode_graphs = false;
    const auto g1 = generate(m, reqs, go), g0 = generate(m, reqs, ge);
    const auto s1 = spec_decode(m, d, reqs, so), s0 = spec_decode(m, d, reqs, se);
    CHECK(s1.draft_graphs);  // DFlash's draft steps were captured too
    CHECK_FALSE(s0.draft_graphs);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
        CHECK(g1.outputs[i].tokens == g0.outputs[i].tokens);
        CHECK(s1.outputs[i].tokens == s0.outputs[i].tokens);
        CHECK(s1.outputs[i].acceptance_lengths == s0.outputs[i].acceptance_lengths);
        CHECK(s1.outputs[i].tokens == g1.outputs[i].tokens);
    }

    // An EAGLE-3 drafter: its chain steps as CUDA graphs draft what they draft op by op.
    DrafterSpec spec;
    spec.type = "eagle3";
    spec.target = m.shape();
    spec.layer_ids = eagle3_layer_ids(static_cast<int>(m.shape().num_layers));
    spec.token_counts.assign(static_cast<std::size_t>(m.shape().vocab_size), 1);
    const TargetHead head = m.head();
    spec.head = &head;
    auto e = make_drafter(spec, 7, at::kCPU);
    {
        at::NoGradGuard ng;
        at::Generator g = cpu_generator(7);
        for (auto& p : e->module().parameters()) p.add_(at::randn(p.sizes(), g) * 0.05);
    }
    e->module().eval();
    const auto e1 = spec_decode(m, *e, reqs, so), e0 = spec_decode(m, *e, reqs, se);
    CHECK(e1.draft_graphs);
    CHECK_FALSE(e0.draft_graphs);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
        INFO("EAGLE-3, prompt " << i);
        CHECK(e1.outputs[i].tokens == e0.outputs[i].tokens);
        CHECK(e1.outputs[i].acceptance_lengths == e0.outputs[i].acceptance_lengths);
        CHECK(e1.outputs[i].tokens == g1.outputs[i].tokens);
    }
}

} // TEST_SUITE
