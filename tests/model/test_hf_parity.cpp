// Parity with HF transformers on the same random weights: the target's captured layer k equals
// transformers' hidden_states[k+1] (Qwen3, Qwen3-MoE written by transformers' own save_pretrained,
// and Llama with Llama-3 rope scaling), and an exported
// drafter run by a transformers-built DFlash decoder gives the drafter's block outputs, and
// transformers' AutoModel loads an export with the DFlash model code (auto_map).
// Runs tests/model/hf_reference.py with $HSRING_PYTHON; exits 77 (skipped) only where that
// script cannot import transformers.
#include "dflash_fixture.hpp"
#include "model/drafter/dflash/export.hpp"
#include "model/target/gpt_oss_mlp.hpp"
#include "model/io/mxfp4.hpp"
#include "model/ops/sink_attention.hpp"
#include "model/ops/yarn_rope.hpp"
#include "model/io/safetensors.hpp"
#include "model/target/target.hpp"
#include "model/ops/tensor_init.hpp"
#include "model_test_util.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

using namespace hsring;
using namespace hsring::model;
using hsring::test::TempDir;

namespace {

void run_reference(const std::string& args) { hsring::test::run_python_script("hf_reference.py", args); }

TensorMap sharpened_weights(const ModelShape& s) {
    TensorMap w = random_target_weights(s, 31, at::kCPU, at::kFloat);
    at::Generator g = cpu_generator(32);
    for (auto& [name, t] : w) {
        if (name.ends_with("norm.weight")) t = at::empty(t.sizes()).uniform_(0.5, 2.5, g);
        if (name.ends_with("mlp.gate.weight") || name.ends_with("mlp.router.weight")) t = t * 10;  // a router that decides
        if (name.ends_with("sinks") || name.ends_with("bias")) t = t * 20;  // sinks and biases that matter
        if (s.arch == "llama" && (name.find("q_proj") != std::string::npos || name.find("k_proj") != std::string::npos))
            t = t * 8;
    }
    return w;
}

// Max |a - ref| / max |ref|, in fp64.
double max_rel_err(const at::Tensor& a, const at::Tensor& ref) {
    at::Tensor r = ref.to(at::kDouble);
    return (a.to(at::kDouble) - r).abs().max().item<double>() / r.abs().max().item<double>();
}

// The HF directory dir/model (written by the caller) against transformers: every layer of every
// sequence of a packed forward, and the logits, within relative error 1e-4 (fp32).
// hsring_dir: where hsring reads the model from, when not dir/model (the same weights in another form).
void check_model_dir(const TempDir& dir, const ModelShape& s, const std::string& hsring_dir = "") {
    const std::vector<std::vector<std::int64_t>> seqs{{1, 5, 9, 200, 3, 77, 4, 8, 100, 12, 13, 14, 15, 16, 17, 18, 19, 20,
                                                       21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35},
                                                      {7}, {300, 301, 302, 303, 304, 305, 306, 307, 308}};
    std::ofstream(dir.path() / "tokens.json") << nlohmann::json(seqs).dump();
    run_reference("target --model '" + (dir.path() / "model").string() + "' --tokens '" +
                  (dir.path() / "tokens.json").string() + "' --out '" + (dir.path() / "ref.safetensors").string() + "'");
    auto ref = load_safetensors(dir.path() / "ref.safetensors");

    ModelShape parsed = resolve_model_shape(hsring_dir.empty() ? (dir.path() / "model").string() : hsring_dir);
    CHECK(parsed.rope_scaling.type == s.rope_scaling.type);
    CHECK(parsed.num_moe_layers() == s.num_moe_layers());
    auto model = TargetModel::load(parsed, at::kCPU, at::kFloat, 0);
    std::vector<std::int64_t> flat, cu{0};
    for (const auto& q : seqs) {
        flat.insert(flat.end(), q.begin(), q.end());
        cu.push_back(static_cast<std::int64_t>(flat.size()));
    }
    std::vector<int> ids;
    for (int i = 0; i < s.num_layers; ++i) ids.push_back(i);
    std::vector<at::Tensor> hs(ids.size());
    at::Tensor logits = model.forward(at::tensor(flat, at::kLong), cu, ids,
                                      [&](std::size_t i, const at::Tensor& h) { hs[i] = h; }, true);
    for (std::size_t q = 0; q < seqs.size(); ++q) {
        const auto len = cu[q + 1] - cu[q];
        // hidden_states[0] is the embedding: no layer id maps to it.
        for (int k = 0; k < s.num_layers; ++k) {
            INFO("sequence " << q << " layer " << k << " = hidden_states[" << k + 1 << "]");
            const at::Tensor& want = ref.at("seq" + std::to_string(q) + ".hidden." + std::to_string(k + 1));
            const at::Tensor got = hs[static_cast<std::size_t>(k)].narrow(0, cu[q], len);
            CHECK(at::allclose(got, want, 1e-4, 1e-5));
            CHECK(max_rel_err(got, want) < 1e-4);
            if (s.num_moe_layers() > 0)
                MESSAGE(s.arch << " seq " << q << " layer " << k << std::string(s.is_moe_layer(k) ? " (sparse)" : " (dense)")
                               << ": max relative error " << max_rel_err(got, want));
        }
        const at::Tensor got = logits.narrow(0, cu[q], len), want = ref.at("seq" + std::to_string(q) + ".logits");
        CHECK(at::allclose(got, want, 1e-4, 1e-5));
        CHECK(max_rel_err(got, want) < 1e-4);
        if (s.num_moe_layers() > 0) MESSAGE(s.arch << " seq " << q << " logits: max relative error " << max_rel_err(got, want));
    }
}

void check_target(ModelShape s) {
    TempDir dir;
    save_hf_model_dir(dir.path() / "model", s, sharpened_weights(s));
    check_model_dir(dir, s);
}

// A tiny random Qwen3MoeForCausalLM written by transformers itself (hf_reference.py qwen3-moe:
// per-expert tensor names, sharded with an index, num_experts as "num_local_experts").
void check_transformers_moe(bool norm_topk_prob) {
    TempDir dir;
    run_reference("qwen3-moe --out '" + (dir.path() / "model").string() + "'" +
                  (norm_topk_prob ? "" : " --no-norm-topk-prob"));
    REQUIRE(std::filesystem::exists(dir.path() / "model" / "model.safetensors.index.json"));
    ModelShape s = preset_shape("tiny-moe");  // the same shape
    s.norm_topk_prob = norm_topk_prob;
    const ModelShape parsed = resolve_model_shape((dir.path() / "model").string());
    CHECK(parsed.arch == "qwen3_moe");
    CHECK(parsed.num_experts == 8);
    CHECK(parsed.num_experts_per_tok == 2);
    CHECK(parsed.moe_intermediate_size == 32);
    CHECK(parsed.norm_topk_prob == norm_topk_prob);
    CHECK(parsed.mlp_only_layers == std::vector<std::int64_t>{2});
    CHECK(parsed.is_moe_layer(0));
    CHECK(!parsed.is_moe_layer(2));
    check_model_dir(dir, s);
}

// A tiny random GptOssForCausalLM written by transformers (hf_reference.py gpt-oss): sliding
// window 4 on layers 0 and 2 (shorter than the 33- and 9-token sequences), sinks and every bias
// non-zero, YaRN; the same weights shipped with MXFP4 experts (blocks/scales) load to the same model.
void check_transformers_gpt_oss(bool mxfp4) {
    TempDir dir;
    const std::string fp32_dir = (dir.path() / "model").string(), mx_dir = (dir.path() / "mxfp4").string();
    run_reference("gpt-oss --out '" + fp32_dir + "' --mxfp4-out '" + mx_dir + "'");
    const ModelShape parsed = resolve_model_shape(fp32_dir);
    CHECK(parsed.arch == "gpt_oss");
    CHECK(parsed.num_experts == 8);
    CHECK(parsed.num_experts_per_tok == 2);
    CHECK(parsed.moe_intermediate_size == 32);
    CHECK(parsed.num_moe_layers() == 4);
    CHECK(parsed.attention_bias);
    CHECK(parsed.attention_window(0) == 4);
    CHECK(parsed.attention_window(1) == 0);
    CHECK(parsed.rope_scaling.type == "yarn");
    CHECK(parsed.rope_scaling.factor == 32.0);
    CHECK(!parsed.rope_scaling.truncate);
    if (mxfp4) {  // hsring reads the MXFP4 directory; transformers the fp32 one (the reference)
        auto archive = TensorArchive::open(mx_dir);
        REQUIRE(archive.contains("model.layers.0.mlp.experts.gate_up_proj_blocks"));
        REQUIRE(archive.contains("model.layers.3.mlp.experts.down_proj_scales"));
        REQUIRE(!archive.contains("model.layers.0.mlp.experts.gate_up_proj"));
    }
    check_model_dir(dir, preset_shape("tiny-gpt-oss"), mxfp4 ? mx_dir : "");
}

// The drafter's block outputs against a transformers-built DFlash decoder (hf_reference.py dflash:
// Qwen3 modules and Qwen3RotaryEmbedding from the exported config.json).
void check_exported_drafter(test::DFlashFixture& f) {
    auto drafter = f.drafter(5);
    const std::vector<std::int64_t> anchors{0, 6, 15, 26, 33, 45};
    auto blocks = dflash_blocks_at(f.batch.tokens, f.batch.loss_mask, f.batch.cu_seqlens, 4, 511, anchors, 7.0);
    at::Tensor out;
    {
        at::NoGradGuard ng;
        out = dflash_hidden(drafter, f.head, f.batch, blocks, {});
    }
    TempDir dir;
    export_dflash(dir.path() / "drafter", drafter, f.config);
    save_safetensors(dir.path() / "embed.safetensors", {{"embed", f.head.embed}});
    save_safetensors(dir.path() / "hidden.safetensors", {{"hidden", f.batch.hidden}});
    std::vector<std::int64_t> tokens(f.batch.tokens.data_ptr<std::int64_t>(),
                                     f.batch.tokens.data_ptr<std::int64_t>() + f.batch.tokens.numel());
    std::ofstream(dir.path() / "blocks.json")
        << nlohmann::json{{"anchors", anchors}, {"seq_begin", blocks.seq_begin}, {"tokens", tokens}}.dump();
    const auto p = [&](const char* n) { return "'" + (dir.path() / n).string() + "'"; };
    run_reference(std::string("dflash --drafter ") + p("drafter") + " --embed " + p("embed.safetensors") +
                  " --hidden " + p("hidden.safetensors") + " --blocks " + p("blocks.json") + " --out " +
                  p("ref.safetensors"));
    auto ref = load_safetensors(dir.path() / "ref.safetensors");
    for (std::size_t j = 0; j < anchors.size(); ++j) {
        INFO("block " << j << " anchor " << anchors[j]);
        CHECK(at::allclose(out.narrow(0, static_cast<std::int64_t>(j) * 4, 4), ref.at("block." + std::to_string(j)),
                           1e-4, 1e-5));
    }
}

} // namespace

TEST_SUITE("hf_parity") {

TEST_CASE("gpt-oss written by transformers (sinks, biases, sliding window 4, YaRN): every layer and the logits") {
    check_transformers_gpt_oss(false);
}

TEST_CASE("gpt-oss with MXFP4 experts as shipped (_blocks/_scales) equals transformers on their dequantised weights") {
    check_transformers_gpt_oss(true);
}

TEST_CASE("gpt-oss written by hsring (save_hf_model_dir) loads in transformers with every tensor and equals it") {
    check_target(preset_shape("tiny-gpt-oss"));
}

TEST_CASE("Qwen3 tiny: layer k equals transformers' hidden_states[k+1], the last one included") {
    check_target(preset_shape("tiny"));
}

TEST_CASE("Qwen3-MoE written by transformers (sparse layers + one dense, norm_topk_prob): every layer and the logits") {
    check_transformers_moe(true);
}

TEST_CASE("Qwen3-MoE written by transformers without norm_topk_prob: every layer and the logits") {
    check_transformers_moe(false);
}

TEST_CASE("Qwen3-MoE written by hsring (save_hf_model_dir) loads in transformers with every tensor and equals it") {
    ModelShape s = preset_shape("tiny-moe");
    s.norm_topk_prob = false;
    s.decoder_sparse_step = 2;  // layers 1 and 3 sparse, 0 and 2 dense
    s.mlp_only_layers = {};
    check_target(s);
}

TEST_CASE("the real target models/pycode-small (bin/make-target: bf16, tied embeddings, rope_parameters) equals transformers") {
    TempDir dir;
    const std::filesystem::path real =
        std::filesystem::path(hsring::test::env_or("HSRING_SOURCE_ROOT", ".")) / "models" / "pycode-small";
    std::filesystem::copy(real, dir.path() / "model", std::filesystem::copy_options::recursive);
    const ModelShape s = resolve_model_shape((dir.path() / "model").string());
    CHECK(s.tie_word_embeddings);
    CHECK(s.vocab_size == 1024);
    check_model_dir(dir, s);
}

TEST_CASE("Llama with Llama-3 rope scaling and tied embeddings equals transformers") {
    ModelShape s = preset_shape("tiny");
    s.arch = "llama";
    s.rope_theta = 10000.0;
    s.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 16};
    s.tie_word_embeddings = true;
    check_target(s);
}

TEST_CASE("an exported drafter run by a transformers-built DFlash decoder gives the same block outputs") {
    test::DFlashFixture f;
    check_exported_drafter(f);
}

// gpt-oss's drafters keep the target's YaRN (attention factor on cos/sin); a small original
// context (16) puts the sequences' positions (up to 48) in the interpolated range.
TEST_CASE("a drafter with YaRN rope scaling: the export's rope_parameters give transformers the same block outputs") {
    test::DFlashFixture f;
    f.config.rope_scaling.type = "yarn";
    f.config.rope_scaling.factor = 8.0;
    f.config.rope_scaling.original_max_position_embeddings = 16;
    f.config.rope_scaling.truncate = false;
    check_exported_drafter(f);
}

TEST_CASE("AutoModel with trust_remote_code builds DFlashDraftModel from the export's auto_map, not a plain Qwen3") {
    test::DFlashFixture f;
    auto drafter = f.drafter(5);
    TempDir dir;
    export_dflash(dir.path() / "drafter", drafter, f.config);
    hsring::test::run_python_script("hf_auto_map.py", "'" + (dir.path() / "drafter").string() + "'");
}

TEST_CASE("MXFP4 experts (gpt-oss) dequantise to exactly what transformers' convert_moe_packed_tensors gives") {
    TempDir dir;
    run_reference("mxfp4 --out '" + (dir.path() / "ref.safetensors").string() + "'");
    auto ref = load_safetensors(dir.path() / "ref.safetensors");
    const at::Tensor blocks = ref.at("blocks"), scales = ref.at("scales");
    for (const auto& [name, dt] : {std::pair{"bf16", at::kBFloat16}, std::pair{"fp32", at::kFloat}}) {
        INFO(name);
        const at::Tensor got = dequantize_mxfp4(blocks, scales, dt, "test");
        CHECK((got.scalar_type() == dt));
        CHECK(got.sizes() == ref.at(name).sizes());
        CHECK(at::equal(got, ref.at(name)));
    }
}

TEST_CASE("gpt-oss's sparse MLP (top-k then softmax, biases, interleaved gate/up, clamped SwiGLU) equals transformers' GptOssMLP") {
    TempDir dir;
    run_reference("gpt-oss-mlp --out '" + (dir.path() / "ref.safetensors").string() + "'");
    auto ref = load_safetensors(dir.path() / "ref.safetensors");
    REQUIRE_MESSAGE(ref.at("clamped").item<std::int64_t>() > 100, "the reference must exercise the SwiGLU clamp");
    // transformers keeps the experts input-major ([E, H, 2I], [E, I, H]); hsring output-major.
    GptOssMoeWeights w{ref.at("router.weight"), ref.at("router.bias"),
                       ref.at("experts.gate_up_proj").transpose(1, 2).contiguous(), ref.at("experts.gate_up_proj_bias"),
                       ref.at("experts.down_proj").transpose(1, 2).contiguous(), ref.at("experts.down_proj_bias")};
    const at::Tensor got = gpt_oss_moe_mlp(ref.at("x"), w, GptOssRouting{2});
    const double err = max_rel_err(got, ref.at("out"));
    MESSAGE("gpt-oss MLP max relative error " << err);
    CHECK(err < 1e-5);
    // The other order (softmax, then top-k, as Qwen3-MoE) or gate/up not interleaved would differ.
    GptOssMoeWeights halves = w;
    halves.gate_up = at::cat({w.gate_up.slice(1, 0, 64, 2), w.gate_up.slice(1, 1, 64, 2)}, 1);
    CHECK(max_rel_err(gpt_oss_moe_mlp(ref.at("x"), halves, GptOssRouting{2}), ref.at("out")) > 1e-2);
}

TEST_CASE("YaRN rope frequencies and attention factor (gpt-oss's rope_scaling) equal transformers'") {
    TempDir dir;
    run_reference("yarn --out '" + (dir.path() / "ref.safetensors").string() + "'");
    auto ref = load_safetensors(dir.path() / "ref.safetensors");
    RopeScaling gpt_oss{"yarn"};  // gpt-oss-20b: theta 150000, head_dim 64
    gpt_oss.factor = 32;
    gpt_oss.original_max_position_embeddings = 4096;
    gpt_oss.truncate = false;
    RopeScaling deepseek_like{"yarn"};  // truncating, attention factor from mscale / mscale_all_dim
    deepseek_like.factor = 40;
    deepseek_like.original_max_position_embeddings = 4096;
    deepseek_like.mscale = 1.0;
    deepseek_like.mscale_all_dim = 0.707;
    const std::vector<std::tuple<std::int64_t, double, RopeScaling>> cases{{64, 150000.0, gpt_oss},
                                                                          {128, 10000.0, deepseek_like}};
    for (std::size_t c = 0; c < cases.size(); ++c) {
        INFO("case " << c);
        const auto& [head_dim, theta, params] = cases[c];
        const YarnRope r = yarn_rope(head_dim, theta, params);
        const at::Tensor want = ref.at(fmt::format("case{}.inv_freq", c));
        CHECK(r.inv_freq.sizes() == want.sizes());
        CHECK(max_rel_err(r.inv_freq, want) < 1e-6);
        CHECK(r.attention_factor == doctest::Approx(ref.at(fmt::format("case{}.attention_factor", c)).item<double>()).epsilon(1e-12));
    }
    CHECK(test::error_of([] { yarn_rope(63, 1e4, RopeScaling{"yarn"}); }).find("even") != std::string::npos);
}

TEST_CASE("gpt-oss attention with sinks, GQA and a sliding window shorter than the sequences equals transformers'") {
    TempDir dir;
    run_reference("sink-attention --out '" + (dir.path() / "ref.safetensors").string() + "'");
    auto ref = load_safetensors(dir.path() / "ref.safetensors");
    const std::vector<std::int64_t> cu{0, 9, 29};
    const double scale = 1.0 / std::sqrt(16.0);
    for (const auto& [name, window] : {std::pair{std::string("window"), std::int64_t{4}}, std::pair{std::string("full"), std::int64_t{0}}}) {
        INFO(name);
        const at::Tensor got = sink_attention(ref.at("q"), ref.at("k"), ref.at("v"), ref.at("sinks"), cu, window, scale);
        const double err = max_rel_err(got, ref.at("out." + name));
        MESSAGE("sink attention (" << name << ") max relative error " << err);
        CHECK(err < 1e-5);
    }
    // Without the sinks (a sink of -inf takes no mass) the result is plain softmax attention: different.
    const at::Tensor no_sink = at::full({4}, -1e30);
    CHECK(max_rel_err(sink_attention(ref.at("q"), ref.at("k"), ref.at("v"), no_sink, cu, 4, scale), ref.at("out.window")) > 1e-2);
}

} // TEST_SUITE
