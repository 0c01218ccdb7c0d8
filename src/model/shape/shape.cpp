// Model shapes without torch (see hsring/model_shape.hpp).
#include "hsring/error.hpp"
#include "hsring/model_shape.hpp"
#include "hsring/rope_scaling_json.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <initializer_list>

namespace hsring {
namespace {

ModelShape tiny() {
    ModelShape s;
    s.arch = "qwen3";
    s.hidden_size = 64;
    s.num_layers = 8;
    s.num_heads = 4;
    s.num_kv_heads = 2;
    s.head_dim = 16;
    s.intermediate_size = 192;
    s.vocab_size = 512;
    s.max_position_embeddings = 4096;
    s.rope_theta = 1e6;
    s.rms_norm_eps = 1e-6;
    s.mask_token_id = 511;  // the last row: never produced by the demo data
    s.embedding_init_std = 0.125;
    return s;
}

ModelShape qwen3_8b() {
    ModelShape s;
    s.arch = "qwen3";
    s.hidden_size = 4096;
    s.num_layers = 36;
    s.num_heads = 32;
    s.num_kv_heads = 8;
    s.head_dim = 128;
    s.intermediate_size = 12288;
    s.vocab_size = 151936;
    s.max_position_embeddings = 40960;
    s.rope_theta = 1e6;
    s.rms_norm_eps = 1e-6;
    s.mask_token_id = 151669;
    return s;
}

ModelShape llama3_8b() {
    ModelShape s;
    s.arch = "llama";
    s.hidden_size = 4096;
    s.num_layers = 32;
    s.num_heads = 32;
    s.num_kv_heads = 8;
    s.head_dim = 128;
    s.intermediate_size = 14336;
    s.vocab_size = 128256;
    s.max_position_embeddings = 131072;
    s.rope_theta = 500000.0;
    s.rms_norm_eps = 1e-5;
    s.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 8192};
    s.mask_token_id = 128002;  // <|reserved_special_token_0|>
    return s;
}

// Qwen/Qwen3-30B-A3B's config.json: 48 sparse layers of 128 experts, 8 per token; vocabulary,
// positions, rope, norms and mask token as Qwen3-8B.
ModelShape qwen3_30b_a3b() {
    ModelShape s = qwen3_8b();
    s.arch = "qwen3_moe";
    s.hidden_size = 2048;
    s.num_layers = 48;
    s.num_kv_heads = 4;
    s.intermediate_size = 6144;
    s.num_experts = 128;
    s.num_experts_per_tok = 8;
    s.moe_intermediate_size = 768;
    s.norm_topk_prob = true;
    return s;
}

// `tiny` with sparse layers (8 experts, top 2) and one dense layer: a MoE target for CPU tests.
ModelShape tiny_moe() {
    ModelShape s = tiny();
    s.arch = "qwen3_moe";
    s.num_layers = 4;
    s.num_experts = 8;
    s.num_experts_per_tok = 2;
    s.moe_intermediate_size = 32;
    s.norm_topk_prob = true;
    s.mlp_only_layers = {2};
    return s;
}

// transformers' GptOssConfig default: even layers sliding, odd layers full.
std::vector<std::string> alternating_layer_types(std::int64_t layers) {
    std::vector<std::string> types;
    for (std::int64_t i = 0; i < layers; ++i) types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    return types;
}

// openai/gpt-oss-20b's config.json: 24 layers of 32 experts (4 per token, width 2880), sliding
// window 128 on even layers, YaRN x32 over 4,096 original positions.
ModelShape gpt_oss_20b() {
    ModelShape s;
    s.arch = "gpt_oss";
    s.hidden_size = 2880;
    s.num_layers = 24;
    s.num_heads = 64;
    s.num_kv_heads = 8;
    s.head_dim = 64;
    s.intermediate_size = 2880;
    s.vocab_size = 201088;
    s.max_position_embeddings = 131072;
    s.rope_theta = 150000.0;
    s.rms_norm_eps = 1e-5;
    s.rope_scaling.type = "yarn";
    s.rope_scaling.factor = 32.0;
    s.rope_scaling.original_max_position_embeddings = 4096;
    s.rope_scaling.truncate = false;
    s.num_experts = 32;
    s.num_experts_per_tok = 4;
    s.moe_intermediate_size = 2880;
    s.attention_bias = true;
    s.sliding_window = 128;
    s.layer_types = alternating_layer_types(s.num_layers);
    // <|reserved_200000|>: a reserved id the tokenizer never produces, the one a public JAX port of
    // DFlash for gpt-oss uses (not checked against z-lab/gpt-oss-20b-DFlash's config.json).
    s.mask_token_id = 200000;
    return s;
}

// gpt-oss's structure at `tiny`'s sizes (sliding window 4): a gpt_oss target for CPU tests.
ModelShape tiny_gpt_oss() {
    ModelShape s = gpt_oss_20b();
    const ModelShape t = tiny();
    s.hidden_size = t.hidden_size;
    s.num_layers = 4;
    s.num_heads = t.num_heads;
    s.num_kv_heads = t.num_kv_heads;
    s.head_dim = t.head_dim;
    s.intermediate_size = 32;
    s.moe_intermediate_size = 32;
    s.vocab_size = t.vocab_size;
    s.max_position_embeddings = t.max_position_embeddings;
    s.num_experts = 8;
    s.num_experts_per_tok = 2;
    s.sliding_window = 4;
    s.layer_types = alternating_layer_types(s.num_layers);
    s.mask_token_id = t.mask_token_id;
    s.embedding_init_std = t.embedding_init_std;
    return s;
}

// The gpt-oss keys of config.json (transformers' GptOssConfig): every layer sparse, the experts'
// width is intermediate_size; layer_types default to alternating sliding/full.
void parse_gpt_oss(const nlohmann::json& j, const std::filesystem::path& file, ModelShape& s) {
    auto int_key = [&](std::initializer_list<const char*> keys, std::optional<std::int64_t> fallback) -> std::int64_t {
        for (const char* key : keys) {
            if (!j.contains(key) || j[key].is_null()) continue;
            if (!j[key].is_number_integer())
                fail("{}: \"{}\" must be an integer, got {}", file.string(), key, j[key].dump());
            return j[key].get<std::int64_t>();
        }
        if (fallback) return *fallback;
        fail("{}: missing key \"{}\" (a gpt_oss config.json needs it)", file.string(), *keys.begin());
    };
    s.num_experts = int_key({"num_local_experts", "num_experts"}, std::nullopt);
    s.num_experts_per_tok = int_key({"num_experts_per_tok", "experts_per_token"}, std::nullopt);
    s.moe_intermediate_size = s.intermediate_size;
    s.sliding_window = int_key({"sliding_window"}, 128);
    s.attention_bias = j.value("attention_bias", true);
    s.swiglu_limit = j.value("swiglu_limit", 7.0);
    if (s.num_experts < 1) fail("{}: \"num_local_experts\" {} must be >= 1", file.string(), s.num_experts);
    if (s.num_experts_per_tok < 1 || s.num_experts_per_tok > s.num_experts)
        fail("{}: \"num_experts_per_tok\" {} must lie in [1, {}] (the experts a token is routed to, of "
             "\"num_local_experts\" {})",
             file.string(), s.num_experts_per_tok, s.num_experts, s.num_experts);
    if (s.sliding_window < 1) fail("{}: \"sliding_window\" {} must be >= 1", file.string(), s.sliding_window);
    if (!j.contains("layer_types") || j["layer_types"].is_null()) {
        s.layer_types = alternating_layer_types(s.num_layers);
        return;
    }
    const auto& v = j["layer_types"];
    if (!v.is_array() || static_cast<std::int64_t>(v.size()) != s.num_layers)
        fail("{}: \"layer_types\" must list one type per layer ({} layers), got {}", file.string(), s.num_layers,
             v.dump());
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_string() || (v[i] != "full_attention" && v[i] != "sliding_attention"))
            fail("{}: \"layer_types\"[{}] is {}: hsring knows \"full_attention\" and \"sliding_attention\"",
                 file.string(), i, v[i].dump());
        s.layer_types.push_back(v[i].get<std::string>());
    }
}

// The Qwen3-MoE keys of config.json (transformers' Qwen3MoeConfig: decoder_sparse_step,
// norm_topk_prob and mlp_only_layers have defaults, the sizes do not here).
void parse_moe(const nlohmann::json& j, const std::filesystem::path& file, ModelShape& s) {
    auto int_key = [&](const char* key, std::optional<std::int64_t> fallback) -> std::int64_t {
        if (!j.contains(key) || j[key].is_null()) {
            if (fallback) return *fallback;
            fail("{}: missing key \"{}\" (a qwen3_moe config.json needs it)", file.string(), key);
        }
        if (!j[key].is_number_integer()) fail("{}: \"{}\" must be an integer, got {}", file.string(), key, j[key].dump());
        return j[key].get<std::int64_t>();
    };
    // transformers 5 writes num_experts as "num_local_experts" (Qwen3MoeConfig.attribute_map);
    // published checkpoints say "num_experts".
    const char* experts_key = j.contains("num_experts") ? "num_experts" : "num_local_experts";
    if (!j.contains("num_experts") && !j.contains("num_local_experts"))
        fail("{}: missing key \"num_experts\" (or \"num_local_experts\"): a qwen3_moe config.json needs it",
             file.string());
    s.num_experts = int_key(experts_key, std::nullopt);
    if (j.contains("num_experts") && j.contains("num_local_experts") && !j["num_local_experts"].is_null() &&
        j["num_local_experts"] != j["num_experts"])
        fail("{}: \"num_experts\" {} and \"num_local_experts\" {} disagree: keep one", file.string(),
             j["num_experts"].dump(), j["num_local_experts"].dump());
    s.num_experts_per_tok = int_key("num_experts_per_tok", std::nullopt);
    s.moe_intermediate_size = int_key("moe_intermediate_size", std::nullopt);
    s.decoder_sparse_step = int_key("decoder_sparse_step", 1);
    if (j.contains("norm_topk_prob") && !j["norm_topk_prob"].is_null()) {
        if (!j["norm_topk_prob"].is_boolean())
            fail("{}: \"norm_topk_prob\" must be true or false, got {}", file.string(), j["norm_topk_prob"].dump());
        s.norm_topk_prob = j["norm_topk_prob"].get<bool>();
    }
    if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
        const auto& v = j["mlp_only_layers"];
        if (!v.is_array()) fail("{}: \"mlp_only_layers\" must be a list of layer indices, got {}", file.string(), v.dump());
        for (const auto& e : v) {
            if (!e.is_number_integer())
                fail("{}: \"mlp_only_layers\" must hold layer indices (integers), got {}", file.string(), e.dump());
            s.mlp_only_layers.push_back(e.get<std::int64_t>());
        }
    }
    if (s.num_experts < 0) fail("{}: \"{}\" {} must be >= 0", file.string(), experts_key, s.num_experts);
    if (s.decoder_sparse_step < 1)
        fail("{}: \"decoder_sparse_step\" {} must be >= 1 (every N-th layer is sparse)", file.string(),
             s.decoder_sparse_step);
    if (s.num_moe_layers() == 0) return;  // every layer dense: the expert sizes are unused
    if (s.num_experts_per_tok < 1 || s.num_experts_per_tok > s.num_experts)
        fail("{}: \"num_experts_per_tok\" {} must lie in [1, {}] (the experts a token is routed to, of \"{}\" {})",
             file.string(), s.num_experts_per_tok, s.num_experts, experts_key, s.num_experts);
    if (s.moe_intermediate_size < 1)
        fail("{}: \"moe_intermediate_size\" {} must be >= 1", file.string(), s.moe_intermediate_size);
}

} // namespace

bool ModelShape::is_moe_layer(std::int64_t layer) const {
    return std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end() &&
           num_experts > 0 && decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

std::int64_t ModelShape::attention_window(std::int64_t layer) const {
    const bool sliding = layer >= 0 && layer < static_cast<std::int64_t>(layer_types.size()) &&
                         layer_types[static_cast<std::size_t>(layer)] == "sliding_attention";
    return sliding ? sliding_window : 0;
}

std::int64_t ModelShape::num_moe_layers() const {
    std::int64_t n = 0;
    for (std::int64_t i = 0; i < num_layers; ++i) n += is_moe_layer(i) ? 1 : 0;
    return n;
}

const std::vector<std::string>& preset_names() {
    static const std::vector<std::string> names{"tiny",        "tiny-moe",     "tiny-gpt-oss", "qwen3-8b",
                                                "qwen3-30b-a3b", "gpt-oss-20b", "llama3-8b"};
    return names;
}

ModelShape preset_shape(std::string_view name) {
    ModelShape s;
    if (name == "tiny") s = tiny();
    else if (name == "tiny-moe") s = tiny_moe();
    else if (name == "tiny-gpt-oss") s = tiny_gpt_oss();
    else if (name == "gpt-oss-20b") s = gpt_oss_20b();
    else if (name == "qwen3-8b") s = qwen3_8b();
    else if (name == "qwen3-30b-a3b") s = qwen3_30b_a3b();
    else if (name == "llama3-8b") s = llama3_8b();
    else {
        std::string known;
        for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
        fail("unknown model preset '{}': known presets are {} (write model = \"preset:NAME\"), "
             "or give a HF model directory",
             name, known);
    }
    s.source = "preset:" + std::string(name);
    return s;
}

bool is_preset_spec(std::string_view spec) { return spec.starts_with("preset:"); }

ModelShape parse_hf_config(const std::filesystem::path& file) {
    std::ifstream in(file);
    if (!in) fail("{}: cannot open the model's config.json: {}", file.string(), errno_text(errno));
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        fail("{}: not valid JSON: {}", file.string(), e.what());
    }
    auto need = [&](const char* key) -> const nlohmann::json& {
        if (!j.contains(key)) fail("{}: missing key \"{}\" (is this a HF causal-LM config.json?)", file.string(), key);
        return j.at(key);
    };
    auto as_int = [&](const char* key) -> std::int64_t {
        const auto& v = need(key);
        if (!v.is_number_integer()) fail("{}: \"{}\" must be an integer", file.string(), key);
        return v.get<std::int64_t>();
    };
    ModelShape s;
    std::string mt = j.value("model_type", "");
    if (mt == "qwen3" || mt == "qwen3_moe" || mt == "llama" || mt == "gpt_oss") s.arch = mt;
    else
        fail("{}: model_type \"{}\" is not supported: hsring runs qwen3, qwen3_moe, gpt_oss and llama targets",
             file.string(), mt);
    s.source = file.parent_path().string();
    s.hidden_size = as_int("hidden_size");
    s.num_layers = as_int("num_hidden_layers");
    s.num_heads = as_int("num_attention_heads");
    s.num_kv_heads = j.contains("num_key_value_heads") ? as_int("num_key_value_heads") : s.num_heads;
    s.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? as_int("head_dim") : s.hidden_size / s.num_heads;
    s.intermediate_size = as_int("intermediate_size");
    s.vocab_size = as_int("vocab_size");
    s.max_position_embeddings = j.value("max_position_embeddings", std::int64_t{4096});
    s.rope_theta = j.value("rope_theta", 10000.0);
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object())  // transformers >= 5
        s.rope_theta = j["rope_parameters"].value("rope_theta", s.rope_theta);
    s.rms_norm_eps = j.value("rms_norm_eps", 1e-6);
    s.tie_word_embeddings = j.value("tie_word_embeddings", false);
    const nlohmann::json* rs = nullptr;
    if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) rs = &j["rope_scaling"];
    else if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rs = &j["rope_parameters"];
    if (rs) s.rope_scaling = parse_rope_scaling(*rs, file.string(), s.max_position_embeddings);
    if (s.num_heads <= 0 || s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0)
        fail("{}: num_attention_heads {} must be a positive multiple of num_key_value_heads {}",
             file.string(), s.num_heads, s.num_kv_heads);
    if (j.contains("use_sliding_window") && j["use_sliding_window"].is_boolean() && j["use_sliding_window"].get<bool>())
        fail("{}: \"use_sliding_window\" is true: sliding-window attention is not supported (hsring attends to the "
             "whole causal prefix)", file.string());
    if (s.arch == "qwen3_moe") parse_moe(j, file, s);
    if (s.arch == "gpt_oss") parse_gpt_oss(j, file, s);
    if (s.arch == "gpt_oss" && s.vocab_size > 200000) s.mask_token_id = 200000;  // as preset gpt-oss-20b
    if ((s.arch == "qwen3" || s.arch == "qwen3_moe") && s.vocab_size > 151669) s.mask_token_id = 151669;
    return s;
}

ModelShape resolve_model_shape(std::string_view spec, const std::filesystem::path& base_dir) {
    if (is_preset_spec(spec)) return preset_shape(spec.substr(7));
    std::filesystem::path dir(spec);
    if (dir.is_relative() && !base_dir.empty()) dir = base_dir / dir;
    if (!std::filesystem::is_directory(dir))
        fail("model '{}': no such directory (give a HF model directory with config.json and "
             "*.safetensors, or \"preset:NAME\")",
             dir.string());
    auto cfg = dir / "config.json";
    if (!std::filesystem::exists(cfg))
        fail("model directory {} has no config.json (is it a HF model directory?)", dir.string());
    return parse_hf_config(cfg);
}

std::vector<int> dflash_layer_ids(int n, int draft) {
    if (draft <= 0) fail("the drafter needs at least one layer");
    if (draft == 1) return {n / 2};
    std::vector<int> ids;
    const double span = n - 4;
    for (int i = 0; i < draft; ++i)  // nearbyint: ties to even, like Python's round()
        ids.push_back(static_cast<int>(std::nearbyint(1.0 + i * span / (draft - 1))));
    return ids;
}

std::vector<int> eagle3_layer_ids(int n, const std::vector<int>& aux) {
    std::vector<int> ids = aux.empty() ? std::vector<int>{1, n / 2 - 1, n - 4} : aux;
    ids.push_back(n - 1);
    return ids;
}

} // namespace hsring
