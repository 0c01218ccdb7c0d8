#include "model/target/target.hpp"

#include "hsring/error.hpp"
#include "hsring/rope_scaling_json.hpp"
#include "model/io/mxfp4.hpp"
#include "model/ops/sink_attention.hpp"
#include "model/ops/tensor_init.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <optional>
#include <unordered_map>

namespace hsring::model {
namespace fs = std::filesystem;

namespace {

constexpr double kInitStd = 0.02;  // transformers' initializer_range default

using Shape = std::vector<std::int64_t>;
// Gives the tensor `name` of `shape` (from a checkpoint, a map, or drawn at random).
using Getter = std::function<at::Tensor(const std::string& name, const Shape& shape)>;

std::string layer_prefix(std::int64_t i) { return "model.layers." + std::to_string(i) + "."; }

// HF names of a sparse layer's router and of expert e's projections (per expert on disk, as
// published Qwen3-MoE checkpoints and transformers' save_pretrained write them).
std::string router_name(std::int64_t layer) { return layer_prefix(layer) + "mlp.gate.weight"; }
std::string expert_name(std::int64_t layer, std::int64_t e, const char* proj) {
    return layer_prefix(layer) + "mlp.experts." + std::to_string(e) + "." + proj + ".weight";
}

// gpt-oss keeps a layer's experts stacked, input-major as transformers holds them:
// gate_up_proj [E, H, 2I] (gate/up interleaved), down_proj [E, I, H], biases [E, 2I] and [E, H].
// Published checkpoints ship the two weights as MXFP4 (NAME_blocks + NAME_scales, mxfp4.hpp).
std::string oss_experts_name(std::int64_t layer, const char* tensor) {
    return layer_prefix(layer) + "mlp.experts." + tensor;
}

bool is_gpt_oss(const ModelShape& s) { return s.arch == "gpt_oss"; }

// The model's RMSNorm. GptOssRMSNorm multiplies by the weight in fp32 and rounds once;
// Qwen3's and Llama's round to the activations' dtype first (ops.hpp rms_norm).
at::Tensor model_norm(const ModelShape& s, const at::Tensor& x, const at::Tensor& w) {
    if (!is_gpt_oss(s)) return rms_norm(x, w, s.rms_norm_eps);
    const at::Tensor xf = x.to(at::kFloat);
    return (w.to(at::kFloat) * (xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + s.rms_norm_eps)))
        .to(x.scalar_type());
}

bool is_norm(const std::string& name) { return name.size() >= 11 && name.ends_with("norm.weight"); }

// Every tensor of the model under its HF name, in load order.
std::vector<std::pair<std::string, Shape>> tensor_specs(const ModelShape& s) {
    const std::int64_t h = s.hidden_size, d = s.head_dim, q = s.num_heads * d, kv = s.num_kv_heads * d,
                       inter = s.intermediate_size;
    std::vector<std::pair<std::string, Shape>> out{{"model.embed_tokens.weight", {s.vocab_size, h}}};
    for (std::int64_t i = 0; i < s.num_layers; ++i) {
        const std::string p = layer_prefix(i);
        out.push_back({p + "input_layernorm.weight", {h}});
        out.push_back({p + "self_attn.q_proj.weight", {q, h}});
        out.push_back({p + "self_attn.k_proj.weight", {kv, h}});
        out.push_back({p + "self_attn.v_proj.weight", {kv, h}});
        if (s.attention_bias) {
            out.push_back({p + "self_attn.q_proj.bias", {q}});
            out.push_back({p + "self_attn.k_proj.bias", {kv}});
            out.push_back({p + "self_attn.v_proj.bias", {kv}});
        }
        if (s.qk_norm()) {
            out.push_back({p + "self_attn.q_norm.weight", {d}});
            out.push_back({p + "self_attn.k_norm.weight", {d}});
        }
        out.push_back({p + "self_attn.o_proj.weight", {h, q}});
        if (s.attention_bias) out.push_back({p + "self_attn.o_proj.bias", {h}});
        if (s.attention_sinks()) out.push_back({p + "self_attn.sinks", {s.num_heads}});
        out.push_back({p + "post_attention_layernorm.weight", {h}});
        if (is_gpt_oss(s)) {
            const std::int64_t e = s.num_experts, moe = s.moe_intermediate_size;
            out.push_back({p + "mlp.router.weight", {e, h}});
            out.push_back({p + "mlp.router.bias", {e}});
            out.push_back({oss_experts_name(i, "gate_up_proj"), {e, h, 2 * moe}});
            out.push_back({oss_experts_name(i, "gate_up_proj_bias"), {e, 2 * moe}});
            out.push_back({oss_experts_name(i, "down_proj"), {e, moe, h}});
            out.push_back({oss_experts_name(i, "down_proj_bias"), {e, h}});
        } else if (s.is_moe_layer(i)) {
            const std::int64_t moe = s.moe_intermediate_size;
            out.push_back({router_name(i), {s.num_experts, h}});
            for (std::int64_t e = 0; e < s.num_experts; ++e) {
                out.push_back({expert_name(i, e, "gate_proj"), {moe, h}});
                out.push_back({expert_name(i, e, "up_proj"), {moe, h}});
                out.push_back({expert_name(i, e, "down_proj"), {h, moe}});
            }
        } else {
            out.push_back({p + "mlp.gate_proj.weight", {inter, h}});
            out.push_back({p + "mlp.up_proj.weight", {inter, h}});
            out.push_back({p + "mlp.down_proj.weight", {h, inter}});
        }
    }
    out.push_back({"model.norm.weight", {h}});
    if (!s.tie_word_embeddings) out.push_back({"lm_head.weight", {s.vocab_size, h}});
    return out;
}

Getter random_getter(const ModelShape& s, std::uint64_t seed, at::Device device, at::ScalarType dtype) {
    const double embed_std = s.embedding_init_std;
    return [=](const std::string& name, const Shape& shape) {
        if (is_norm(name)) return at::ones(shape, at::TensorOptions().device(device).dtype(dtype));
        const bool embedding = name == "model.embed_tokens.weight" || name == "lm_head.weight";
        return seeded_normal(seed, name, shape, embedding ? embed_std : kInitStd, device, dtype);
    };
}

// A linear weight in FP8 under its HF name.
using Fp8Getter = std::function<Fp8Weight(const std::string& name, const Shape& shape)>;

// The block size of a checkpoint published in FP8: config.json's quantization_config
// (quant_method "fp8", weight_block_size, as Qwen3-*-FP8 write it); [128, 128] when absent.
std::vector<std::int64_t> fp8_block_size(const ModelShape& shape) {
    const fs::path file = fs::path(shape.source) / "config.json";
    std::ifstream in(file);
    if (!in) return {128, 128};
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("quantization_config")) return {128, 128};
    const auto& q = j["quantization_config"];
    if (q.value("quant_method", std::string()) != "fp8") return {128, 128};
    if (q.contains("fmt") && q["fmt"] != "e4m3")
        fail("{}: quantization_config.fmt is {}: hsring reads FP8 checkpoints in e4m3", file.string(), q["fmt"].dump());
    if (q.contains("activation_scheme") && q["activation_scheme"] != "dynamic")
        fail("{}: quantization_config.activation_scheme is {}: hsring scales activations per token (\"dynamic\")",
             file.string(), q["activation_scheme"].dump());
    if (!q.contains("weight_block_size")) return {128, 128};
    const auto& b = q["weight_block_size"];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() || b[0] <= 0 ||
        b[1] <= 0)
        fail("{}: quantization_config.weight_block_size must be two positive integers, got {}", file.string(), b.dump());
    return {b[0].get<std::int64_t>(), b[1].get<std::int64_t>()};
}

// A weight of an FP8 checkpoint: NAME (F8_E4M3) + NAME_scale_inv (fp32 per block); `where` for errors.
bool has_block_scales(const TensorArchive& archive, const std::string& name) {
    return archive.contains(name + "_scale_inv");
}
std::string tensor_where(const TensorArchive& archive, const std::string& name) {
    return archive.file_of(name).string() + ": " + name;
}

Getter archive_getter(std::shared_ptr<TensorArchive> archive, at::Device device, at::ScalarType dtype,
                      std::vector<std::int64_t> fp8_block) {
    return [=](const std::string& name, const Shape& shape) {
        // gpt-oss's MXFP4 experts: NAME_blocks + NAME_scales dequantise to the output-major
        // [E, out, in]; handed out as the input-major view the HF name means ([E, in, out]).
        if (shape.size() == 3 && !archive->contains(name) && archive->contains(name + "_blocks")) {
            const std::string file = archive->file_of(name + "_blocks").string();
            if (!archive->contains(name + "_scales"))
                fail("{}: has {}_blocks but no {}_scales (an MXFP4 tensor needs both)", file, name, name);
            at::Tensor w = dequantize_mxfp4(archive->get(name + "_blocks").to(device),
                                            archive->get(name + "_scales").to(device), dtype, file + ": " + name);
            if (w.dim() != 3 || w.size(0) != shape[0] || w.size(1) != shape[2] || w.size(2) != shape[1])
                fail("{}: {}_blocks/_scales hold {} values, expected {} (experts x out x in)", file, name,
                     shape_str(w.sizes()), shape_str(Shape{shape[0], shape[2], shape[1]}));
            return w.transpose(1, 2);
        }
        if (has_block_scales(*archive, name))  // one tensor at a time in fp32, then the compute dtype
            return dequantize_fp8_blocks(archive->get(name, shape).to(device), archive->get(name + "_scale_inv"),
                                         fp8_block, dtype, tensor_where(*archive, name));
        const at::Tensor& t = archive->get(name, shape);
        if (t.scalar_type() == at::kFloat8_e4m3fn)
            fail("{}: an F8_E4M3 tensor without {}_scale_inv: hsring reads FP8 checkpoints with block scales "
                 "(NAME_scale_inv, as Qwen3-*-FP8 publish them); per-tensor FP8 formats are not supported",
                 tensor_where(*archive, name), name);
        return t.to(device, dtype);
    };
}

// FP8 linear weights of a checkpoint: block-scaled ones converted to row scales on the device; any
// other quantised per row from the compute dtype (one tensor at a time: never a bf16 model).
Fp8Getter archive_fp8_getter(std::shared_ptr<TensorArchive> archive, at::Device device, Getter plain,
                             std::vector<std::int64_t> fp8_block) {
    return [=](const std::string& name, const Shape& shape) {
        if (!has_block_scales(*archive, name)) return fp8_weight(plain(name, shape));
        return fp8_weight_from_blocks(archive->get(name, shape).to(device), archive->get(name + "_scale_inv"),
                                      fp8_block, tensor_where(*archive, name));
    };
}

Fp8Getter quantizing_getter(Getter plain) {
    return [plain](const std::string& name, const Shape& shape) { return fp8_weight(plain(name, shape)); };
}

void check_shape(const ModelShape& s) {
    if (s.arch != "qwen3" && s.arch != "qwen3_moe" && s.arch != "llama" && s.arch != "gpt_oss")
        fail("model {}: architecture \"{}\" is not supported (qwen3, qwen3_moe, gpt_oss, llama)", s.source, s.arch);
    if (s.num_experts > 0 && s.arch != "qwen3_moe" && s.arch != "gpt_oss")
        fail("model {}: {} experts on a \"{}\" model: only qwen3_moe and gpt_oss have experts", s.source,
             s.num_experts, s.arch);
    if (is_gpt_oss(s) && s.num_moe_layers() != s.num_layers)
        fail("model {}: a gpt_oss model has experts in every layer ({} experts, {} of {} layers sparse)", s.source,
             s.num_experts, s.num_moe_layers(), s.num_layers);
    if (!s.layer_types.empty() && static_cast<std::int64_t>(s.layer_types.size()) != s.num_layers)
        fail("model {}: {} layer_types for {} layers", s.source, s.layer_types.size(), s.num_layers);
    for (const auto& t : s.layer_types)
        if (t != "full_attention" && t != "sliding_attention")
            fail("model {}: layer type \"{}\" is not supported (full_attention, sliding_attention)", s.source, t);
    if (s.num_moe_layers() > 0 &&
        (s.num_experts_per_tok < 1 || s.num_experts_per_tok > s.num_experts || s.moe_intermediate_size <= 0))
        fail("model {}: inconsistent experts ({} per token of {}, moe_intermediate_size {})", s.source,
             s.num_experts_per_tok, s.num_experts, s.moe_intermediate_size);
    if (s.hidden_size <= 0 || s.num_layers <= 0 || s.head_dim <= 0 || s.vocab_size <= 0 ||
        s.intermediate_size <= 0 || s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0)
        fail("model {}: inconsistent shape (hidden {}, layers {}, heads {}/{}, head_dim {}, vocab {})", s.source,
             s.hidden_size, s.num_layers, s.num_heads, s.num_kv_heads, s.head_dim, s.vocab_size);
}

std::shared_ptr<TensorArchive> open_checkpoint(const ModelShape& shape) {
    auto archive = std::make_shared<TensorArchive>(TensorArchive::open(shape.source));
    for (std::int64_t i = 0; i < shape.num_layers; ++i) {
        const std::string fused = layer_prefix(i) + "mlp.experts.gate_up_proj";
        if (shape.arch == "qwen3_moe" && shape.is_moe_layer(i) && archive->contains(fused))
            fail("{}: has {} (experts fused into one tensor): hsring reads per-expert tensors "
                 "(model.layers.L.mlp.experts.E.{{gate,up,down}}_proj.weight, as published checkpoints and "
                 "transformers' save_pretrained write them); re-save the model with save_pretrained",
                 archive->file_of(fused).string(), fused);
    }
    for (const char* bias : {"model.layers.0.self_attn.q_proj.bias", "model.layers.0.mlp.gate_proj.bias"})
        if (!shape.attention_bias && archive->contains(bias))
            fail("{}: has {}: attention/MLP biases are not supported here (Qwen3 and Llama-3 have none; its "
                 "config.json does not set attention_bias)",
                 shape.source, bias);
    return archive;
}

} // namespace

TensorMap random_target_weights(const ModelShape& shape, std::uint64_t seed, at::Device device,
                                at::ScalarType dtype) {
    check_shape(shape);
    auto get = random_getter(shape, seed, device, dtype);
    TensorMap out;
    for (const auto& [name, s] : tensor_specs(shape)) out[name] = get(name, s);
    return out;
}

void save_hf_model_dir(const fs::path& dir, const ModelShape& s, const TensorMap& weights) {
    check_shape(s);
    fs::create_directories(dir);
    const nlohmann::json rope = rope_scaling_json(s.rope_scaling, s.rope_theta);
    const char* architecture = s.arch == "qwen3"       ? "Qwen3ForCausalLM"
                               : s.arch == "qwen3_moe" ? "Qwen3MoeForCausalLM"
                               : s.arch == "gpt_oss"   ? "GptOssForCausalLM"
                                                       : "LlamaForCausalLM";
    std::string dtype = "float32";
    if (auto it = weights.find("model.embed_tokens.weight"); it != weights.end()) {
        if (it->second.scalar_type() == at::kBFloat16) dtype = "bfloat16";
        if (it->second.scalar_type() == at::kHalf) dtype = "float16";
    }
    nlohmann::json j = {
        {"architectures", {architecture}},
        {"model_type", s.arch},
        {"hidden_size", s.hidden_size},
        {"num_hidden_layers", s.num_layers},
        {"num_attention_heads", s.num_heads},
        {"num_key_value_heads", s.num_kv_heads},
        {"head_dim", s.head_dim},
        {"intermediate_size", s.intermediate_size},
        {"vocab_size", s.vocab_size},
        {"max_position_embeddings", s.max_position_embeddings},
        {"rms_norm_eps", s.rms_norm_eps},
        {"rope_theta", s.rope_theta},
        {"rope_parameters", rope},
        {"hidden_act", "silu"},
        {"attention_bias", s.attention_bias},
        {"attention_dropout", 0.0},
        {"mlp_bias", false},
        {"tie_word_embeddings", s.tie_word_embeddings},
        {"dtype", dtype},
    };
    if (s.arch == "qwen3_moe") {
        j["num_experts"] = s.num_experts;
        j["num_experts_per_tok"] = s.num_experts_per_tok;
        j["moe_intermediate_size"] = s.moe_intermediate_size;
        j["norm_topk_prob"] = s.norm_topk_prob;
        j["decoder_sparse_step"] = s.decoder_sparse_step;
        j["mlp_only_layers"] = s.mlp_only_layers;
        j["use_sliding_window"] = false;
    }
    if (s.arch == "gpt_oss") {
        j["num_local_experts"] = s.num_experts;
        j["num_experts_per_tok"] = s.num_experts_per_tok;
        j["sliding_window"] = s.sliding_window;
        j["layer_types"] = s.layer_types;
        j["swiglu_limit"] = s.swiglu_limit;
        j.erase("mlp_bias");
    }
    std::ofstream out(dir / "config.json");
    out << j.dump(2) << "\n";
    if (!out) fail("{}: cannot write config.json", dir.string());
    save_safetensors(dir / "model.safetensors", weights, {{"format", "pt"}});
}

TargetHead load_target_head(const ModelShape& shape, at::Device device, at::ScalarType dtype, std::uint64_t seed) {
    check_shape(shape);
    const Shape vh{shape.vocab_size, shape.hidden_size};
    TargetHead head;
    if (is_preset_spec(shape.source)) {
        auto get = random_getter(shape, seed, device, dtype);
        head.embed = get("model.embed_tokens.weight", vh);
        head.lm_head = shape.tie_word_embeddings ? head.embed : get("lm_head.weight", vh);
        head.norm = get("model.norm.weight", {shape.hidden_size});
        return head;
    }
    auto archive = open_checkpoint(shape);
    head.embed = archive->get("model.embed_tokens.weight", vh).to(device, dtype);
    head.lm_head = shape.tie_word_embeddings ? head.embed : archive->get("lm_head.weight", vh).to(device, dtype);
    head.norm = archive->get("model.norm.weight", {shape.hidden_size}).to(device, dtype);
    return head;
}

TargetModel TargetModel::build(const ModelShape& shape, const TensorGetter& get, at::Device device,
                               at::ScalarType dtype, const Fp8Getter& get_fp8) {
    check_shape(shape);
    TargetModel m;
    m.shape_ = shape;
    m.device_ = device;
    m.dtype_ = dtype;
    at::NoGradGuard no_grad;
    std::unordered_map<std::string, Shape> specs;  // a MoE model has tens of thousands
    for (auto& [name, s] : tensor_specs(shape)) specs.emplace(std::move(name), std::move(s));
    auto spec = [&](const std::string& name) -> const Shape& {
        auto it = specs.find(name);
        HSRING_ASSERT(it != specs.end(), "no tensor spec for {}", name);
        return it->second;
    };
    auto take = [&](const std::string& name) { return get(name, spec(name)); };
    // FP8 weights sharing an input stacked along their rows (each keeps its row scales).
    auto take_fp8 = [&](const std::vector<std::string>& names) {
        std::vector<Fp8Weight> parts;
        for (const auto& name : names) parts.push_back(get_fp8(name, spec(name)));
        return parts.size() == 1 ? parts[0] : fp8_cat(parts);
    };
    // A sparse layer's experts stacked: each expert's tensors are copied into their rows, so a
    // layer's experts never exist twice.
    auto take_experts = [&](std::int64_t i) {
        const std::int64_t e_count = shape.num_experts, moe = shape.moe_intermediate_size, h = shape.hidden_size;
        const auto options = at::TensorOptions().device(device).dtype(dtype);
        MoeWeights w{take(router_name(i)), at::empty({e_count, 2 * moe, h}, options),
                     at::empty({e_count, h, moe}, options)};
        for (std::int64_t e = 0; e < e_count; ++e) {
            w.gate_up[e].narrow(0, 0, moe).copy_(take(expert_name(i, e, "gate_proj")));
            w.gate_up[e].narrow(0, moe, moe).copy_(take(expert_name(i, e, "up_proj")));
            w.down[e].copy_(take(expert_name(i, e, "down_proj")));
        }
        return w;
    };
    // gpt-oss: HF's input-major experts transposed to hsring's output-major layout, one layer at a
    // time (an MXFP4 checkpoint's dequantised weights already are: the transpose is a view).
    auto take_oss_experts = [&](std::int64_t i) {
        const std::string p = layer_prefix(i);
        auto output_major = [&](const char* name) { return take(oss_experts_name(i, name)).transpose(1, 2).contiguous(); };
        return GptOssMoeWeights{take(p + "mlp.router.weight"), take(p + "mlp.router.bias"),
                                output_major("gate_up_proj"),  take(oss_experts_name(i, "gate_up_proj_bias")),
                                output_major("down_proj"),     take(oss_experts_name(i, "down_proj_bias"))};
    };
    m.embed_ = take("model.embed_tokens.weight");
    for (std::int64_t i = 0; i < shape.num_layers; ++i) {
        const std::string p = layer_prefix(i);
        Layer l;
        l.input_norm = take(p + "input_layernorm.weight");
        // Fused projections: one GEMM for q|k|v and one for gate|up.
        const std::vector<std::string> qkv{p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                                           p + "self_attn.v_proj.weight"};
        if (get_fp8)
            l.qkv8 = take_fp8(qkv);
        else
            l.qkv = at::cat({take(qkv[0]), take(qkv[1]), take(qkv[2])}, 0);
        if (shape.qk_norm()) {
            l.q_norm = take(p + "self_attn.q_norm.weight");
            l.k_norm = take(p + "self_attn.k_norm.weight");
        }
        if (get_fp8)
            l.o8 = take_fp8({p + "self_attn.o_proj.weight"});
        else
            l.o = take(p + "self_attn.o_proj.weight");
        if (shape.attention_bias) {
            l.qkv_bias = at::cat({take(p + "self_attn.q_proj.bias"), take(p + "self_attn.k_proj.bias"),
                                  take(p + "self_attn.v_proj.bias")}, 0);
            l.o_bias = take(p + "self_attn.o_proj.bias");
        }
        if (shape.attention_sinks()) l.sinks = take(p + "self_attn.sinks");
        l.window = shape.attention_window(i);
        l.post_norm = take(p + "post_attention_layernorm.weight");
        if (is_gpt_oss(shape)) {
            l.oss_moe = take_oss_experts(i);
        } else if (shape.is_moe_layer(i)) {
            l.moe = take_experts(i);
        } else if (get_fp8) {
            l.gate_up8 = take_fp8({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"});
            l.down8 = take_fp8({p + "mlp.down_proj.weight"});
        } else {
            l.gate_up = at::cat({take(p + "mlp.gate_proj.weight"), take(p + "mlp.up_proj.weight")}, 0);
            l.down = take(p + "mlp.down_proj.weight");
        }
        m.layers_.push_back(std::move(l));
    }
    m.final_norm_ = take("model.norm.weight");
    m.lm_head_ = shape.tie_word_embeddings ? m.embed_ : take("lm_head.weight");
    // On the model's device once: a step then makes its rotary tables without a host copy (a
    // pageable copy cannot be captured into the decode engine's CUDA graphs).
    m.inv_freq_ = rope_inv_freq(shape.head_dim, shape.rope_theta, shape.rope_scaling).to(device);
    m.rope_attention_factor_ = rope_attention_factor(shape.rope_scaling);
    return m;
}

TargetModel TargetModel::from_weights(const ModelShape& shape, const TensorMap& weights, at::Device device,
                                      at::ScalarType dtype, const std::string& where, bool fp8) {
    const Getter get = [&](const std::string& name, const Shape& s) {
        auto it = weights.find(name);
        if (it == weights.end()) fail("{}: no tensor {}", where, name);
        if (it->second.sizes() != at::IntArrayRef(s))
            fail("{}: tensor {} has shape {}, expected {}", where, name, shape_str(it->second.sizes()), shape_str(s));
        return it->second.to(device, dtype);
    };
    return build(shape, get, device, dtype, fp8 ? quantizing_getter(get) : Fp8Getter{});
}

TargetModel TargetModel::load(const ModelShape& shape, at::Device device, at::ScalarType dtype, std::uint64_t seed,
                              bool fp8) {
    check_shape(shape);
    // Presets are drawn tensor by tensor on the device; checkpoints are read tensor by tensor
    // from the mapping: never a second full copy of the model. In FP8 a preset's weights are the
    // bf16 model's of the same seed, quantised (what `hsring-bench target --weights` compares).
    if (is_preset_spec(shape.source)) {
        const Getter get = random_getter(shape, seed, device, dtype);
        return build(shape, get, device, dtype, fp8 ? quantizing_getter(get) : Fp8Getter{});
    }
    auto archive = open_checkpoint(shape);
    const auto block = fp8_block_size(shape);
    const Getter get = archive_getter(archive, device, dtype, block);
    return build(shape, get, device, dtype, fp8 ? archive_fp8_getter(archive, device, get, block) : Fp8Getter{});
}

at::Tensor TargetModel::layer_forward(const Layer& l, const at::Tensor& h, const RopeTables& rope, Attend attend) const {
    const std::int64_t t = h.size(0), hq = shape_.num_heads, hkv = shape_.num_kv_heads, d = shape_.head_dim;
    const double eps = shape_.rms_norm_eps;
    at::Tensor qkv = normed_linear(h, l.input_norm, l.qkv, l.qkv8);
    if (l.qkv_bias.defined()) qkv = qkv + l.qkv_bias;
    auto parts = qkv.split({hq * d, hkv * d, hkv * d}, 1);
    at::Tensor q = parts[0].view({t, hq, d}), k = parts[1].view({t, hkv, d});
    at::Tensor v = parts[2].reshape({t, hkv, d});
    if (shape_.qk_norm()) {
        q = rms_norm(q, l.q_norm, eps);
        k = rms_norm(k, l.k_norm, eps);
    }
    q = apply_rope(q, rope);
    k = apply_rope(k, rope);
    at::Tensor attn = attend(q, k, v, l);
    // Out of place on purpose: the tensor handed to a layer callback is never written again.
    at::Tensor o = linear(attn.reshape({t, hq * d}), l.o, l.o8);
    if (l.o_bias.defined()) o = o + l.o_bias;
    at::Tensor mid = h + o;
    if (l.oss_moe.router.defined())
        return mid + gpt_oss_moe_mlp(model_norm(shape_, mid, l.post_norm), l.oss_moe,
                                     {shape_.num_experts_per_tok, shape_.swiglu_limit});
    if (l.moe.router.defined())
        return mid + moe_mlp(model_norm(shape_, mid, l.post_norm), l.moe,
                             {shape_.num_experts_per_tok, shape_.norm_topk_prob});
    const at::Tensor gate_up = normed_linear(mid, l.post_norm, l.gate_up, l.gate_up8);
    // FP8: SwiGLU and the down projection's quantisation in one kernel (fp8_weights.hpp).
    if (l.down8.defined()) return mid + fp8_dense(fp8_swiglu_rows(gate_up), l.down8, gate_up.scalar_type());
    return mid + dense(swiglu(gate_up), l.down);
}

at::Tensor TargetModel::normed_linear(const at::Tensor& x, const at::Tensor& norm, const at::Tensor& w,
                                      const Fp8Weight& w8) const {
    // FP8: the RMSNorm and the projection's quantisation in one kernel (fp8_weights.hpp);
    // gpt-oss's norm rounds otherwise (model_norm) and takes the ATen path.
    if (w8.defined() && !is_gpt_oss(shape_))
        return fp8_dense(fp8_rms_norm_rows(x, norm, shape_.rms_norm_eps), w8, x.scalar_type());
    return linear(model_norm(shape_, x, norm), w, w8);
}

at::Tensor TargetModel::linear(const at::Tensor& x, const at::Tensor& w, const Fp8Weight& w8) {
    return w8.defined() ? fp8_dense(x, w8) : dense(x, w);
}

void TargetModel::check_tokens(const at::Tensor& tokens, const std::string& what) const {
    // One sync, but an out-of-range id would otherwise be a device-side assert.
    auto [lo, hi] = at::aminmax(tokens);
    if (lo.item<std::int64_t>() < 0 || hi.item<std::int64_t>() >= shape_.vocab_size)
        fail("{}: token ids must lie in [0, {}), got [{}, {}]", what, shape_.vocab_size, lo.item<std::int64_t>(),
             hi.item<std::int64_t>());
}

int TargetModel::check_layer_ids(const std::vector<int>& layer_ids, const std::string& what) const {
    int last = -1;
    for (int k : layer_ids) {
        if (k < 0 || k >= shape_.num_layers)
            fail("{}: layer id {} is out of range: the model has layers 0..{}", what, k, shape_.num_layers - 1);
        last = std::max(last, k);
    }
    return last;
}

void TargetModel::report_layer(int i, const at::Tensor& h, const std::vector<int>& layer_ids,
                               const LayerCallback& on_layer) const {
    at::Tensor reported;
    for (std::size_t idx = 0; idx < layer_ids.size(); ++idx) {
        if (layer_ids[idx] != i) continue;
        if (!reported.defined())  // HF ties the last hidden state to the final norm's output
            reported = i == shape_.num_layers - 1 ? model_norm(shape_, h, final_norm_) : h;
        if (on_layer) on_layer(idx, reported);
    }
}

at::Tensor TargetModel::forward(const at::Tensor& tokens_in, const std::vector<std::int64_t>& cu_seqlens,
                                const std::vector<int>& layer_ids, const LayerCallback& on_layer, bool want_logits) {
    const std::string what = "target forward (" + shape_.source + ")";
    if (tokens_in.dim() != 1 || tokens_in.scalar_type() != at::kLong)
        fail("{}: tokens must be a 1-D int64 tensor, got {} {}", what, c10::toString(tokens_in.scalar_type()),
             shape_str(tokens_in.sizes()));
    const std::int64_t t = tokens_in.size(0);
    auto seqs = PackedSequences::make(cu_seqlens, t, device_, what);
    const int last = check_layer_ids(layer_ids, what);
    if (t == 0) fail("{}: empty batch", what);
    at::NoGradGuard no_grad;
    at::Tensor tokens = tokens_in.to(device_);
    check_tokens(tokens, what);

    const RopeTables rope = rope_tables(inv_freq_, seqs.positions(device_), dtype_, rope_attention_factor_);
    const double scale = 1.0 / std::sqrt(static_cast<double>(shape_.head_dim));
    const int stop = want_logits ? static_cast<int>(shape_.num_layers) - 1 : last;
    at::Tensor h = embed_.index_select(0, tokens);
    for (int i = 0; i <= stop; ++i) {
        h = layer_forward(layers_[static_cast<std::size_t>(i)], h, rope,
                          [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Layer& l) {
                              if (l.sinks.defined())
                                  return packed_sink_attention(q, k, v, l.sinks, seqs, l.window, scale);
                              return causal_packed_attention(q, k, v, seqs, scale);
                          });
        report_layer(i, h, layer_ids, on_layer);
    }
    if (!want_logits) return {};
    return dense(model_norm(shape_, h, final_norm_), lm_head_);
}

at::Tensor TargetModel::forward_cached(const at::Tensor& tokens_in, const std::vector<std::int64_t>& counts,
                                       KVCache& cache, bool all_logits, const std::vector<int>& layer_ids,
                                       const LayerCallback& on_layer) {
    const std::string what = "target cached forward (" + shape_.source + ")";
    if (tokens_in.dim() != 1 || tokens_in.scalar_type() != at::kLong)
        fail("{}: tokens must be a 1-D int64 tensor, got {} {}", what, c10::toString(tokens_in.scalar_type()),
             shape_str(tokens_in.sizes()));
    if (cache.num_layers() != shape_.num_layers || cache.device() != device_)
        fail("{}: the cache was made for {} layers on {}, the model has {} on {}", what, cache.num_layers(),
             cache.device().str(), shape_.num_layers, device_.str());
    const CacheExtension ext(cache, counts, what);
    if (tokens_in.size(0) != ext.total())
        fail("{}: {} tokens for counts summing to {}", what, tokens_in.size(0), ext.total());
    if (!all_logits)
        for (std::size_t r = 0; r < counts.size(); ++r)
            if (counts[r] < 1) fail("{}: row {} has no new token to take the logits of", what, r);
    check_layer_ids(layer_ids, what);
    at::NoGradGuard no_grad;
    at::Tensor tokens = tokens_in.to(device_);
    check_tokens(tokens, what);

    const RopeTables rope = rope_tables(inv_freq_, ext.positions(), dtype_, rope_attention_factor_);
    const double scale = 1.0 / std::sqrt(static_cast<double>(shape_.head_dim));
    at::Tensor h = embed_.index_select(0, tokens);
    for (std::int64_t i = 0; i < shape_.num_layers; ++i) {
        h = layer_forward(layers_[static_cast<std::size_t>(i)], h, rope,
                          [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Layer& l) {
                              return ext.attend(i, q, k, v, scale, l.window, l.sinks);
                          });
        report_layer(static_cast<int>(i), h, layer_ids, on_layer);
    }
    ext.commit();
    if (!all_logits) {
        std::vector<std::int64_t> last;
        for (std::size_t r = 0; r + 1 < ext.cu().size(); ++r) last.push_back(ext.cu()[r + 1] - 1);
        h = h.index_select(0, at::tensor(last, at::TensorOptions().dtype(at::kLong)).to(device_));
    }
    return dense(model_norm(shape_, h, final_norm_), lm_head_);
}

} // namespace hsring::model
