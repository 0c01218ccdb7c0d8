#pragma once
// The shape of a target model, without torch: enough to size ring slots, validate a config and
// build the model later. Comes from a named preset ("preset:tiny") or a HF model directory's
// config.json (Qwen3, Qwen3-MoE and Llama architectures).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hsring {

struct RopeScaling {
    std::string type;  // "" (none) | "llama3" | "linear" | "yarn"
    double factor = 1.0;
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    std::int64_t original_max_position_embeddings = 8192;
    // yarn (gpt-oss): the correction range in rotations, whether its bounds are floored/ceiled,
    // and the attention factor (given, or from factor and mscale / mscale_all_dim).
    double beta_fast = 32.0;
    double beta_slow = 1.0;
    bool truncate = true;
    std::optional<double> attention_factor, mscale, mscale_all_dim;
};

struct ModelShape {
    std::string arch;    // "qwen3" | "qwen3_moe" | "llama" | "gpt_oss"
    std::string source;  // "preset:NAME" or the model directory
    std::int64_t hidden_size = 0;
    std::int64_t num_layers = 0;
    std::int64_t num_heads = 0;
    std::int64_t num_kv_heads = 0;
    std::int64_t head_dim = 0;
    std::int64_t intermediate_size = 0;  // the dense MLP's (a MoE model's dense layers)
    std::int64_t vocab_size = 0;
    std::int64_t max_position_embeddings = 0;
    double rope_theta = 10000.0;
    double rms_norm_eps = 1e-6;
    RopeScaling rope_scaling;
    bool tie_word_embeddings = false;
    std::optional<std::int64_t> mask_token_id;  // a known reserved token for DFlash, if any
    // Random presets only: std of the embedding and LM head (every other matrix: 0.02, as
    // transformers initialises). 0.02 at hidden 64 gives logits too flat to learn from in a
    // short demo, so `tiny` uses 1/sqrt(hidden).
    double embedding_init_std = 0.02;

    // Qwen3-MoE: a sparse layer routes each token to num_experts_per_tok of num_experts SwiGLU
    // experts of width moe_intermediate_size (softmax router, top-k, renormalised over the top-k
    // when norm_topk_prob); the other layers run the dense MLP. 0 experts: every layer dense.
    std::int64_t num_experts = 0;
    std::int64_t num_experts_per_tok = 0;
    std::int64_t moe_intermediate_size = 0;
    bool norm_topk_prob = false;
    std::int64_t decoder_sparse_step = 1;
    std::vector<std::int64_t> mlp_only_layers;

    // gpt-oss: every layer sparse (router and experts with biases, the clamped SwiGLU with
    // swiglu_limit), q/k/v/o biases (attention_bias), one learned sink logit per head in every
    // softmax, and per layer full or sliding-window attention (layer_types: "full_attention" |
    // "sliding_attention", a key j visible to query i iff i - sliding_window < j <= i).
    bool attention_bias = false;
    std::int64_t sliding_window = 0;
    std::vector<std::string> layer_types;  // empty: every layer full attention
    double swiglu_limit = 7.0;

    bool qk_norm() const { return arch == "qwen3" || arch == "qwen3_moe"; }
    bool attention_sinks() const { return arch == "gpt_oss"; }
    // The window of layer's attention (0: full causal).
    std::int64_t attention_window(std::int64_t layer) const;
    // transformers' Qwen3MoeDecoderLayer rule: sparse iff not in mlp_only_layers, experts exist
    // and (layer + 1) is a multiple of decoder_sparse_step.
    bool is_moe_layer(std::int64_t layer) const;
    std::int64_t num_moe_layers() const;
};

const std::vector<std::string>& preset_names();
// Throws hsring::Error naming the preset and the known ones.
ModelShape preset_shape(std::string_view name);
// Parses a HF config.json (Qwen3ForCausalLM, Qwen3MoeForCausalLM, LlamaForCausalLM,
// GptOssForCausalLM); errors name
// the file and key.
ModelShape parse_hf_config(const std::filesystem::path& config_json);
// "preset:NAME" or a directory holding config.json (relative to base_dir).
ModelShape resolve_model_shape(std::string_view spec, const std::filesystem::path& base_dir = {});
bool is_preset_spec(std::string_view spec);

// DFlash's default target layers for a drafter of num_draft_layers layers:
// round(1 + i*(N-4)/(n-1)) (Python rounding), or [N/2] for a single draft layer.
std::vector<int> dflash_layer_ids(int num_target_layers, int num_draft_layers);

// EAGLE-3's captured layers for a target of `num_target_layers`: the 3 fused ones, low, middle and
// high = layers 1, n/2 - 1, n - 4 (the public recipe's HF hidden_states 2, n/2, n - 3) or `aux`
// when given, then the target's last layer n - 1 (whose output, through the target's final norm
// and LM head, is what the drafter learns to predict).
std::vector<int> eagle3_layer_ids(int num_target_layers, const std::vector<int>& aux = {});

} // namespace hsring
