#pragma once
// The shape of a DFlash drafter and its HF config.json (the format z-lab's DFlashDraftModel,
// SGLang and vLLM load): a Qwen3 config with architectures ["DFlashDraftModel"], block_size,
// num_target_layers and dflash_config {target_layer_ids, mask_token_id, block_size}, plus
// auto_map for transformers' remote code (kDFlashCodeRepo).
#include "hsring/model_shape.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace hsring::model {

// The HF repo whose dflash.py (class DFlashDraftModel) transformers runs for an exported drafter:
// config.json's auto_map {"AutoModel": "<repo>--dflash.DFlashDraftModel"} makes
// AutoModel.from_pretrained(dir, trust_remote_code=True) fetch the public DFlash code from there
// instead of silently building a plain Qwen3 model from model_type. The drafter is always made
// of Qwen3 layers, so one code file serves drafters of every target.
inline constexpr const char* kDFlashCodeRepo = "z-lab/Qwen3-8B-DFlash-b16";

struct DFlashConfig {
    // Qwen3 layer shape: the target's (the drafter reads the target's embedding and LM head and
    // fuses its hidden states, so hidden and vocab sizes must match; the rest follows DFlash's
    // published drafters, which copy the target's attention and MLP shapes).
    std::int64_t hidden_size = 0;
    std::int64_t num_layers = 0;  // drafter layers
    std::int64_t num_heads = 0;
    std::int64_t num_kv_heads = 0;
    std::int64_t head_dim = 0;
    std::int64_t intermediate_size = 0;
    std::int64_t vocab_size = 0;
    std::int64_t max_position_embeddings = 0;
    double rms_norm_eps = 1e-6;
    double rope_theta = 1e6;
    RopeScaling rope_scaling;  // the target's (Llama-3 targets keep their scaled RoPE)
    // DFlash.
    std::int64_t block_size = 16;
    std::int64_t mask_token_id = -1;
    std::vector<int> target_layer_ids;  // captured target layers (HF hidden_states[k+1])
    std::int64_t num_target_layers = 0;

    std::int64_t num_context_layers() const { return static_cast<std::int64_t>(target_layer_ids.size()); }

    // Throws hsring::Error prefixed by `where` for an inconsistent config.
    void validate(const std::string& where) const;
    // config.json content, and back (`where` names the file in errors).
    nlohmann::json to_hf_json() const;
    static DFlashConfig from_hf_json(const nlohmann::json& j, const std::string& where);
};

// A drafter for `target`: num_layers Qwen3 layers at the target's dims, target_layer_ids empty
// = DFlash's default spread (dflash_layer_ids), mask_token_id < 0 = the target's known one.
DFlashConfig dflash_config_for(const ModelShape& target, int num_layers, int block_size, std::int64_t mask_token_id,
                               std::vector<int> target_layer_ids);

} // namespace hsring::model
