// The target model: equal to an independent naive implementation (Qwen3, Qwen3-MoE, Llama),
// packing-invariant, HF layer numbering, deterministic random presets, HF directories (tied or
// not), clear config.json, checkpoint and input errors.
#include "hsring/error.hpp"
#include "model/io/mxfp4.hpp"
#include "model/target/target.hpp"
#include "model/ops/tensor_init.hpp"
#include "model_test_util.hpp"
#include "naive_reference.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

using namespace hsring;
using namespace hsring::model;
using hsring::test::error_of;
using hsring::test::TempDir;

namespace {

// Random weights with sharper attention than N(0, 0.02) gives (so masking mistakes show) and
// norm weights away from 1 (so a forgotten norm shows).
TensorMap test_weights(const ModelShape& s, std::uint64_t seed) {
    TensorMap w = random_target_weights(s, seed, at::kCPU, at::kFloat);
    at::Generator g = cpu_generator(seed + 1);
    for (auto& [name, t] : w) {
        if (name.ends_with("norm.weight")) t = at::empty(t.sizes()).uniform_(0.5, 2.0, g);
        if (name.find("q_norm") != std::string::npos || name.find("k_norm") != std::string::npos)
            t = at::empty(t.sizes()).uniform_(1.5, 3.0, g);
        if (name.ends_with("mlp.gate.weight")) t = t * 10;  // a router that decides
        if (s.arch == "llama" && (name.find("q_proj") != std::string::npos || name.find("k_proj") != std::string::npos))
            t = t * 8;
    }
    return w;
}

ModelShape llama_tiny() {
    ModelShape s = preset_shape("tiny");
    s.arch = "llama";
    s.source = "test:llama-tiny";
    s.rope_theta = 10000.0;
    // Small original context so positions of a short test cross all three frequency bands.
    s.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 16};
    return s;
}

struct Batch {
    std::vector<std::vector<std::int64_t>> seqs;
    at::Tensor tokens;
    std::vector<std::int64_t> cu{0};
};

Batch make_batch(std::vector<std::int64_t> lengths, std::int64_t vocab, std::uint64_t seed) {
    at::Generator g = cpu_generator(seed);
    Batch b;
    std::vector<at::Tensor> parts;
    for (auto len : lengths) {
        at::Tensor t = at::randint(vocab, {len}, g, at::kLong);
        b.seqs.emplace_back(t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + len);
        parts.push_back(t);
        b.cu.push_back(b.cu.back() + len);
    }
    b.tokens = at::cat(parts);
    return b;
}

std::vector<int> all_layers(const ModelShape& s) {
    std::vector<int> ids;
    for (int i = 0; i < s.num_layers; ++i) ids.push_back(i);
    return ids;
}

std::vector<at::Tensor> capture(TargetModel& m, const Batch& b, const std::vector<int>& ids, at::Tensor* logits) {
    std::vector<at::Tensor> out(ids.size());
    at::Tensor l = m.forward(b.tokens, b.cu, ids, [&](std::size_t i, const at::Tensor& h) { out[i] = h; },
                             logits != nullptr);
    if (logits) *logits = l;
    return out;
}

double rel_err(const at::Tensor& a, const at::Tensor& ref) {
    at::Tensor r = ref.to(at::kDouble);
    return (a.to(at::kDouble) - r).abs().max().item<double>() / r.abs().max().item<double>();
}

void check_against_naive(const ModelShape& s) {
    auto w = test_weights(s, 7);
    auto model = TargetModel::from_weights(s, w, at::kCPU, at::kFloat, "test weights");
    Batch b = make_batch({9, 17, 1, 30}, s.vocab_size, 3);
    at::Tensor logits;
    auto hs = capture(model, b, all_layers(s), &logits);
    auto ref = test::naive_forward(s, w, b.seqs);
    for (std::size_t k = 0; k < hs.size(); ++k) {
        INFO("layer " << k);
        CHECK(hsring::test::dt(hs[k].scalar_type()) == "Float");
        CHECK(rel_err(hs[k], ref.layers[k]) < 1e-4);
    }
    CHECK(rel_err(logits, ref.logits) < 1e-4);
}

// A preset's config.json as hsring writes it (`base`), re-parsed after edits: parse(j) the shape,
// error(j) the message, which must name the file.
struct ConfigJsonProbe {
    TempDir dir;
    std::filesystem::path file;
    nlohmann::json base;

    explicit ConfigJsonProbe(const char* preset) : file(dir.path() / "config.json") {
        const ModelShape s = preset_shape(preset);
        save_hf_model_dir(dir.path(), s, random_target_weights(s, 1, at::kCPU, at::kFloat));
        base = nlohmann::json::parse(std::ifstream(file));
    }
    ModelShape parse(const nlohmann::json& j) const {
        std::ofstream(file) << j.dump();
        return parse_hf_config(file);
    }
    std::string error(const nlohmann::json& j) const {
        std::string msg = error_of([&] { parse(j); });
        CHECK(msg.find(file.string()) != std::string::npos);
        return msg;
    }
};

} // namespace

TEST_SUITE("target") {

TEST_CASE("MXFP4: two e2m1 codes per byte, low nibble first, times 2^(scale - 127) per group of 32") {
    // One group: byte 0 = 0x21 -> codes 1 (0.5), 2 (1.0); byte 1 = 0xF8 -> -0.0, -6.0; byte 2 = 0x7F
    // -> -6.0, 6.0; the rest 0. Scale 128: x 2; a second group with scale 125: x 1/4.
    at::Tensor blocks = at::zeros({1, 2, 16}, at::kByte);
    blocks[0][0][0] = 0x21;
    blocks[0][0][1] = 0xF8;
    blocks[0][0][2] = 0x7F;
    blocks[0][1][15] = 0x53;  // codes 3 (1.5), 5 (3.0)
    const at::Tensor scales = at::tensor(std::vector<std::uint8_t>{128, 125}, at::kByte).view({1, 2});
    const at::Tensor w = dequantize_mxfp4(blocks, scales, at::kFloat, "test");
    REQUIRE(w.sizes() == std::vector<std::int64_t>{1, 64});
    const auto* v = w.data_ptr<float>();
    CHECK(v[0] == 1.0f);
    CHECK(v[1] == 2.0f);
    CHECK(v[2] == 0.0f);
    CHECK(std::signbit(v[2]));
    CHECK(v[3] == -12.0f);
    CHECK(v[4] == -12.0f);
    CHECK(v[5] == 12.0f);
    CHECK(v[6] == 0.0f);
    CHECK(v[62] == 0.375f);
    CHECK(v[63] == 0.75f);
    CHECK(at::equal(dequantize_mxfp4(blocks, scales, at::kBFloat16, "test").to(at::kFloat), w));
    CHECK(test::error_of([&] { dequantize_mxfp4(blocks, scales.view({2, 1}), at::kFloat, "experts.gate_up_proj"); })
              .find("experts.gate_up_proj: MXFP4 blocks [1, 2, 16] and scales [2, 1] do not match") != std::string::npos);
    CHECK(test::error_of([&] { dequantize_mxfp4(blocks.to(at::kInt), scales, at::kFloat, "w"); })
              .find("must be uint8") != std::string::npos);
}

TEST_CASE("Qwen3 tiny equals the naive per-head fp64 reference, every layer and the logits") {
    check_against_naive(preset_shape("tiny"));
}

TEST_CASE("Llama with Llama-3 rope scaling and GQA equals the naive reference") {
    auto s = llama_tiny();
    check_against_naive(s);
}

TEST_CASE("Qwen3-MoE tiny (sparse layers and a dense one) equals the naive reference, every layer and the logits") {
    check_against_naive(preset_shape("tiny-moe"));
    ModelShape s = preset_shape("tiny-moe");
    s.norm_topk_prob = false;
    s.num_experts_per_tok = 3;
    s.decoder_sparse_step = 2;
    s.mlp_only_layers = {};
    check_against_naive(s);
}

// bf16 on the CPU runs the exact paths in bf16, in transformers' eager order (scores and softmax
// in bf16): the sink attention's mask value is bf16's lowest (float's would overflow; it did).
// Measured here: 1.7% (layer 0) to 4.3% (layer 3) from fp32, some of it routing flips.
TEST_CASE("gpt-oss tiny in bf16 on the CPU: finite and within bf16 rounding of fp32, every layer") {
    const ModelShape s = preset_shape("tiny-gpt-oss");
    auto f32 = TargetModel::load(s, at::kCPU, at::kFloat, 3);
    auto b16 = TargetModel::load(s, at::kCPU, at::kBFloat16, 3);
    const std::vector<std::int64_t> cu{0, 30, 31, 50};
    const at::Tensor tokens = at::randint(s.vocab_size, {cu.back()}, cpu_generator(4), at::kLong);
    const std::vector<int> ids{0, 1, 2, 3};
    std::vector<at::Tensor> a(ids.size()), b(ids.size());
    f32.forward(tokens, cu, ids, [&](std::size_t i, const at::Tensor& h) { a[i] = h; });
    b16.forward(tokens, cu, ids, [&](std::size_t i, const at::Tensor& h) { b[i] = h; });
    for (std::size_t i = 0; i < ids.size(); ++i) {
        CHECK(at::isfinite(b[i]).all().item<bool>());
        const at::Tensor ad = a[i].to(at::kDouble);
        const double l2 = ((b[i].to(at::kDouble) - ad).norm() / ad.norm()).item<double>();
        MESSAGE("layer " << ids[i] << ": bf16 vs fp32 relative error (L2) " << l2);
        CHECK(l2 < 6e-2);
    }
}

TEST_CASE("sparse layers follow transformers' rule: not in mlp_only_layers, experts, (i+1) % decoder_sparse_step == 0") {
    ModelShape s = preset_shape("tiny-moe");  // 4 layers, mlp_only_layers [2]
    CHECK(s.qk_norm());
    CHECK((s.is_moe_layer(0) && s.is_moe_layer(1) && !s.is_moe_layer(2) && s.is_moe_layer(3)));
    CHECK(s.num_moe_layers() == 3);
    s.decoder_sparse_step = 2;
    CHECK((!s.is_moe_layer(0) && s.is_moe_layer(1) && !s.is_moe_layer(2) && s.is_moe_layer(3)));
    s.num_experts = 0;
    CHECK(s.num_moe_layers() == 0);
    const ModelShape big = preset_shape("qwen3-30b-a3b");
    CHECK(big.num_moe_layers() == 48);
    CHECK((big.num_experts == 128 && big.num_experts_per_tok == 8 && big.moe_intermediate_size == 768));
    CHECK(big.mask_token_id == 151669);
}

TEST_CASE("a qwen3_moe config.json: expert keys read (num_experts or num_local_experts); bad ones name the file and key") {
    ConfigJsonProbe probe("tiny-moe");
    const nlohmann::json& base = probe.base;
    auto parse = [&](const nlohmann::json& j) { return probe.parse(j); };
    auto error = [&](const nlohmann::json& j) { return probe.error(j); };
    ModelShape p = parse(base);
    CHECK(p.arch == "qwen3_moe");
    CHECK((p.num_experts == 8 && p.num_experts_per_tok == 2 && p.moe_intermediate_size == 32 && p.norm_topk_prob));
    CHECK((p.decoder_sparse_step == 1 && p.mlp_only_layers == std::vector<std::int64_t>{2}));
    nlohmann::json j = base;
    j["num_local_experts"] = j["num_experts"];  // transformers 5's save_pretrained spelling
    j.erase("num_experts");
    CHECK(parse(j).num_experts == 8);
    j["num_experts"] = 6;
    CHECK(error(j).find("disagree") != std::string::npos);
    j = base;
    j.erase("decoder_sparse_step");
    j.erase("norm_topk_prob");
    j["mlp_only_layers"] = nullptr;  // transformers' defaults
    p = parse(j);
    CHECK((p.decoder_sparse_step == 1 && !p.norm_topk_prob && p.mlp_only_layers.empty() && p.num_moe_layers() == 4));

    j = base;
    j["num_experts_per_tok"] = 9;
    CHECK(error(j).find("\"num_experts_per_tok\" 9 must lie in [1, 8]") != std::string::npos);
    j["num_experts_per_tok"] = 0;
    CHECK(error(j).find("\"num_experts_per_tok\" 0 must lie in [1, 8]") != std::string::npos);
    j = base;
    j.erase("num_experts");
    CHECK(error(j).find("missing key \"num_experts\"") != std::string::npos);
    j = base;
    j.erase("moe_intermediate_size");
    CHECK(error(j).find("missing key \"moe_intermediate_size\"") != std::string::npos);
    j = base;
    j["num_experts"] = "8";
    CHECK(error(j).find("\"num_experts\" must be an integer") != std::string::npos);
    j = base;
    j["norm_topk_prob"] = 1;
    CHECK(error(j).find("\"norm_topk_prob\" must be true or false") != std::string::npos);
    j = base;
    j["decoder_sparse_step"] = 0;
    CHECK(error(j).find("\"decoder_sparse_step\" 0 must be >= 1") != std::string::npos);
    j = base;
    j["mlp_only_layers"] = {"2"};
    CHECK(error(j).find("\"mlp_only_layers\" must hold layer indices") != std::string::npos);
    j = base;
    j["use_sliding_window"] = true;
    CHECK(error(j).find("use_sliding_window") != std::string::npos);
    j = base;
    j["model_type"] = "mixtral";
    CHECK(error(j).find("model_type \"mixtral\" is not supported: hsring runs qwen3, qwen3_moe, gpt_oss and llama") !=
          std::string::npos);
}

TEST_CASE("a gpt_oss config.json: experts, window, layer_types and YaRN read; bad ones name the file and key") {
    ConfigJsonProbe probe("tiny-gpt-oss");
    const nlohmann::json& base = probe.base;
    auto parse = [&](const nlohmann::json& j) { return probe.parse(j); };
    auto error = [&](const nlohmann::json& j) { return probe.error(j); };
    ModelShape p = parse(base);
    CHECK(p.arch == "gpt_oss");
    CHECK((p.num_experts == 8 && p.num_experts_per_tok == 2 && p.moe_intermediate_size == 32 && p.num_moe_layers() == 4));
    CHECK((p.attention_bias && p.attention_sinks() && p.sliding_window == 4 && p.swiglu_limit == 7.0));
    CHECK(p.layer_types == std::vector<std::string>{"sliding_attention", "full_attention", "sliding_attention",
                                                    "full_attention"});
    CHECK((p.attention_window(0) == 4 && p.attention_window(1) == 0));
    CHECK((p.rope_scaling.type == "yarn" && p.rope_scaling.factor == 32.0 && !p.rope_scaling.truncate &&
           p.rope_scaling.original_max_position_embeddings == 4096));
    nlohmann::json j = base;
    j.erase("layer_types");  // transformers' default: even layers sliding
    CHECK(parse(j).layer_types == p.layer_types);
    j = base;
    j["experts_per_token"] = 2;  // openai's spelling
    j.erase("num_experts_per_tok");
    CHECK(parse(j).num_experts_per_tok == 2);

    j = base;
    j["layer_types"][2] = "chunked_attention";
    CHECK(error(j).find("\"layer_types\"[2] is \"chunked_attention\"") != std::string::npos);
    j = base;
    j["layer_types"] = {"full_attention"};
    CHECK(error(j).find("\"layer_types\" must list one type per layer (4 layers)") != std::string::npos);
    j = base;
    j["num_experts_per_tok"] = 9;
    CHECK(error(j).find("\"num_experts_per_tok\" 9 must lie in [1, 8]") != std::string::npos);
    j = base;
    j.erase("num_local_experts");
    CHECK(error(j).find("missing key \"num_local_experts\"") != std::string::npos);
    j = base;
    j["sliding_window"] = 0;
    CHECK(error(j).find("\"sliding_window\" 0 must be >= 1") != std::string::npos);
    j = base;
    j["rope_parameters"]["factor"] = 0.5;
    CHECK(error(j).find("\"factor\" 0.5 must be >= 1 for yarn") != std::string::npos);
}

TEST_CASE("a gpt-oss HF directory: a missing expert tensor or half an MXFP4 pair names the file and tensor") {
    const ModelShape s = preset_shape("tiny-gpt-oss");
    const TensorMap good = random_target_weights(s, 5, at::kCPU, at::kFloat);
    TempDir dir;
    auto load_error = [&](const TensorMap& w) {
        save_hf_model_dir(dir.path(), s, w);
        return error_of([&] { TargetModel::load(resolve_model_shape(dir.path().string()), at::kCPU, at::kFloat, 0); });
    };
    TensorMap w = good;
    w.erase("model.layers.2.mlp.experts.down_proj");
    std::string msg = load_error(w);
    CHECK(msg.find((dir.path() / "model.safetensors").string()) != std::string::npos);
    CHECK(msg.find("no tensor model.layers.2.mlp.experts.down_proj") != std::string::npos);
    w = good;
    w.erase("model.layers.1.self_attn.sinks");
    CHECK(load_error(w).find("no tensor model.layers.1.self_attn.sinks") != std::string::npos);
    w = good;
    w.erase("model.layers.0.mlp.experts.gate_up_proj");
    w["model.layers.0.mlp.experts.gate_up_proj_blocks"] = at::zeros({8, 64, 2, 16}, at::kByte);
    CHECK(load_error(w).find("gate_up_proj_blocks but no model.layers.0.mlp.experts.gate_up_proj_scales") !=
          std::string::npos);
    w["model.layers.0.mlp.experts.gate_up_proj_scales"] = at::full({8, 64, 2}, 127, at::kByte);
    save_hf_model_dir(dir.path(), s, w);  // [E, 2I = 64, H / 32 = 2, 16]: the right shape loads
    CHECK_NOTHROW(TargetModel::load(resolve_model_shape(dir.path().string()), at::kCPU, at::kFloat, 0));
    w["model.layers.0.mlp.experts.gate_up_proj_blocks"] = at::zeros({8, 32, 2, 16}, at::kByte);
    w["model.layers.0.mlp.experts.gate_up_proj_scales"] = at::full({8, 32, 2}, 127, at::kByte);
    CHECK(load_error(w).find("hold [8, 32, 64] values, expected [8, 64, 64]") != std::string::npos);
}

TEST_CASE("a Qwen3-MoE HF directory: a missing or misshapen expert tensor names the file and tensor; fused experts are refused") {
    const ModelShape s = preset_shape("tiny-moe");
    const TensorMap good = test_weights(s, 5);
    TempDir dir;
    auto load_error = [&](const TensorMap& w) {
        save_hf_model_dir(dir.path(), s, w);
        return error_of([&] { TargetModel::load(resolve_model_shape(dir.path().string()), at::kCPU, at::kFloat, 0); });
    };
    TensorMap w = good;
    w.erase("model.layers.1.mlp.experts.5.up_proj.weight");
    std::string msg = load_error(w);
    CHECK(msg.find((dir.path() / "model.safetensors").string()) != std::string::npos);
    CHECK(msg.find("no tensor model.layers.1.mlp.experts.5.up_proj.weight") != std::string::npos);
    w = good;
    w.erase("model.layers.3.mlp.gate.weight");
    CHECK(load_error(w).find("no tensor model.layers.3.mlp.gate.weight") != std::string::npos);
    w = good;
    w["model.layers.0.mlp.experts.7.down_proj.weight"] = at::zeros({32, 64});
    msg = load_error(w);
    CHECK(msg.find("model.layers.0.mlp.experts.7.down_proj.weight has shape [32, 64]") != std::string::npos);
    w = good;
    w["model.layers.0.mlp.experts.gate_up_proj"] = at::zeros({8, 64, 64});
    CHECK(load_error(w).find("experts fused into one tensor") != std::string::npos);
    // The good directory loads, with the outputs of its weights.
    save_hf_model_dir(dir.path(), s, good);
    auto from_dir = TargetModel::load(resolve_model_shape(dir.path().string()), at::kCPU, at::kFloat, 0);
    auto direct = TargetModel::from_weights(s, good, at::kCPU, at::kFloat, "test");
    Batch b = make_batch({10, 3}, s.vocab_size, 2);
    CHECK(at::equal(from_dir.forward(b.tokens, b.cu, {}, {}, true), direct.forward(b.tokens, b.cu, {}, {}, true)));
}

TEST_CASE("a packed batch gives each sequence what it gets alone") {
    auto s = preset_shape("tiny");
    auto model = TargetModel::from_weights(s, test_weights(s, 11), at::kCPU, at::kFloat, "test");
    Batch b = make_batch({5, 23, 12}, s.vocab_size, 5);
    const std::vector<int> ids{1, 4, 6};
    at::Tensor packed_logits;
    auto packed = capture(model, b, ids, &packed_logits);
    for (std::size_t q = 0; q < b.seqs.size(); ++q) {
        Batch one;
        one.tokens = b.tokens.narrow(0, b.cu[q], b.cu[q + 1] - b.cu[q]);
        one.cu = {0, one.tokens.size(0)};
        at::Tensor alone_logits;
        auto alone = capture(model, one, ids, &alone_logits);
        for (std::size_t i = 0; i < ids.size(); ++i)
            CHECK(at::allclose(packed[i].narrow(0, b.cu[q], one.cu[1]), alone[i], 1e-5, 1e-6));
        CHECK(at::allclose(packed_logits.narrow(0, b.cu[q], one.cu[1]), alone_logits, 1e-5, 1e-5));
    }
}

TEST_CASE("layer ids follow HF hidden_states[k+1]: callbacks in layer order, the last layer final-normed") {
    auto s = preset_shape("tiny");
    auto w = test_weights(s, 13);
    auto model = TargetModel::from_weights(s, w, at::kCPU, at::kFloat, "test");
    Batch b = make_batch({6, 4}, s.vocab_size, 8);
    auto ref = test::naive_forward(s, w, b.seqs);
    const std::vector<int> ids{7, 0, 3, 3};
    std::vector<std::pair<std::size_t, at::Tensor>> calls;
    at::Tensor logits = model.forward(b.tokens, b.cu, ids, [&](std::size_t i, const at::Tensor& h) {
        calls.emplace_back(i, h);
    });
    CHECK_FALSE(logits.defined());
    REQUIRE(calls.size() == 4);
    CHECK(calls[0].first == 1);  // layer 0 first
    CHECK(calls[1].first == 2);
    CHECK(calls[2].first == 3);
    CHECK(calls[3].first == 0);  // layer 7 = N-1 last
    for (auto& [i, h] : calls) CHECK(rel_err(h, ref.layers[static_cast<std::size_t>(ids[i])]) < 1e-4);
    // Layer N-1 is reported after the final RMSNorm (transformers 5 ties hidden_states[-1] to
    // last_hidden_state): its rows have the norm weight's scale, not the residual stream's.
    const auto& last = calls[3].second;
    at::Tensor normed = last / w.at("model.norm.weight");
    CHECK(at::allclose(normed.pow(2).mean({1}), at::ones({b.tokens.size(0)}), 1e-3, 1e-3));
}

TEST_CASE("random presets are deterministic per (seed, name) and the head matches the model") {
    auto s = preset_shape("tiny");
    auto a = TargetModel::load(s, at::kCPU, at::kFloat, 42);
    auto b = TargetModel::load(s, at::kCPU, at::kFloat, 42);
    auto c = TargetModel::load(s, at::kCPU, at::kFloat, 43);
    Batch batch = make_batch({8}, s.vocab_size, 1);
    at::Tensor la = a.forward(batch.tokens, batch.cu, {}, {}, true);
    CHECK(at::equal(la, b.forward(batch.tokens, batch.cu, {}, {}, true)));
    CHECK_FALSE(at::equal(la, c.forward(batch.tokens, batch.cu, {}, {}, true)));
    TargetHead head = load_target_head(s, at::kCPU, at::kFloat, 42);
    CHECK(at::equal(head.embed, a.head().embed));
    CHECK(at::equal(head.lm_head, a.head().lm_head));
    CHECK_FALSE(at::equal(head.embed, head.lm_head));
    // The same values random_target_weights gives (what a saved HF directory would hold).
    auto w = random_target_weights(s, 42, at::kCPU, at::kFloat);
    CHECK(at::equal(head.embed, w.at("model.embed_tokens.weight")));
    CHECK(at::equal(w.at("lm_head.weight"), head.lm_head));
    // Drawn from the (seed, name) generator alone: nothing else in the process matters.
    at::Tensor direct = seeded_normal(42, "lm_head.weight", {s.vocab_size, s.hidden_size}, 1.0, at::kCPU, at::kFloat);
    CHECK(at::allclose(direct * (head.lm_head.std() / direct.std()), head.lm_head, 1e-4, 1e-6));
}

TEST_CASE("loads a HF directory (untied and tied embeddings) with the same outputs as its weights") {
    for (bool tied : {false, true}) {
        INFO("tied " << tied);
        auto s = preset_shape("tiny");
        s.tie_word_embeddings = tied;
        auto w = test_weights(s, 21);
        TempDir dir;
        save_hf_model_dir(dir.path(), s, w);
        ModelShape parsed = resolve_model_shape(dir.path().string());
        CHECK(parsed.tie_word_embeddings == tied);
        CHECK(parsed.head_dim == s.head_dim);
        auto from_dir = TargetModel::load(parsed, at::kCPU, at::kFloat, 0);
        auto direct = TargetModel::from_weights(s, w, at::kCPU, at::kFloat, "test");
        Batch b = make_batch({10, 3}, s.vocab_size, 2);
        CHECK(at::equal(from_dir.forward(b.tokens, b.cu, {}, {}, true), direct.forward(b.tokens, b.cu, {}, {}, true)));
        TargetHead head = load_target_head(parsed, at::kCPU, at::kFloat, 0);
        CHECK(at::equal(head.embed, w.at("model.embed_tokens.weight")));
        CHECK(at::equal(head.lm_head, tied ? w.at("model.embed_tokens.weight") : w.at("lm_head.weight")));
    }
}

TEST_CASE("a HF directory with a wrong tensor shape names the file and tensor") {
    auto s = preset_shape("tiny");
    auto w = test_weights(s, 1);
    w["model.layers.2.mlp.up_proj.weight"] = at::zeros({5, 5});
    TempDir dir;
    save_hf_model_dir(dir.path(), s, w);
    auto msg = error_of([&] { TargetModel::load(resolve_model_shape(dir.path().string()), at::kCPU, at::kFloat, 0); });
    CHECK(msg.find("model.safetensors") != std::string::npos);
    CHECK(msg.find("model.layers.2.mlp.up_proj.weight") != std::string::npos);
    w.erase("model.layers.2.mlp.up_proj.weight");
    save_hf_model_dir(dir.path(), s, w);
    msg = error_of([&] { TargetModel::load(resolve_model_shape(dir.path().string()), at::kCPU, at::kFloat, 0); });
    CHECK(msg.find("no tensor model.layers.2.mlp.up_proj.weight") != std::string::npos);
}

TEST_CASE("bad forward inputs are clear errors") {
    auto s = preset_shape("tiny");
    auto m = TargetModel::load(s, at::kCPU, at::kFloat, 1);
    at::Tensor tok = at::zeros({6}, at::kLong);
    CHECK(error_of([&] { m.forward(tok, {0, 6}, {8}, {}); }).find("layer id 8") != std::string::npos);
    CHECK(error_of([&] { m.forward(tok, {0, 5}, {1}, {}); }).find("cu_seqlens") != std::string::npos);
    CHECK(error_of([&] { m.forward(tok, {0, 4, 2, 6}, {1}, {}); }).find("decrease") != std::string::npos);
    CHECK(error_of([&] { m.forward(tok.to(at::kInt), {0, 6}, {1}, {}); }).find("int64") != std::string::npos);
    at::Tensor bad = tok.clone();
    bad[3] = s.vocab_size;
    CHECK(error_of([&] { m.forward(bad, {0, 6}, {1}, {}); }).find("token ids") != std::string::npos);
}

} // TEST_SUITE
