#pragma once
// The shape of an EAGLE-3 drafter and its config.json in the original EAGLE-3 format, the one
// SGLang and vLLM load (architectures ["LlamaForCausalLMEagle3"], one Llama decoder layer called
// `midlayer`, the fused layers' ids in eagle_config.eagle_aux_hidden_state_layer_ids as HF
// hidden_states indices = hsring layer id + 1).
//
// hsring captures four target layers for it: the three fused ones (low, middle, high) and the
// target's last layer, whose output through the target's final norm and LM head is what the
// drafter learns to predict (the training target; not part of the export).
#include "hsring/model_shape.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace hsring::model {

struct Eagle3Config {
    // The Llama layer's shape: the target's hidden size (the drafter reads the target's embedding
    // and fuses its hidden states), attention and MLP shapes as the public EAGLE-3 drafters copy them.
    std::int64_t hidden_size = 0;
    std::int64_t num_heads = 0;
    std::int64_t num_kv_heads = 0;
    std::int64_t head_dim = 0;
    std::int64_t intermediate_size = 0;
    std::int64_t vocab_size = 0;        // the target's
    std::int64_t draft_vocab_size = 0;  // the drafter's LM head rows (d2t/t2d map them to the target's ids)
    std::int64_t max_position_embeddings = 0;
    double rms_norm_eps = 1e-6;
    double rope_theta = 1e6;
    RopeScaling rope_scaling;
    std::vector<int> aux_layer_ids;     // the 3 fused target layers (hsring ids: layer k's output)
    int last_layer_id = -1;             // the target's last layer (-1: unknown, e.g. an imported export)
    std::int64_t num_target_layers = 0;

    void validate(const std::string& where) const;
    nlohmann::json to_hf_json() const;
    static Eagle3Config from_hf_json(const nlohmann::json& j, const std::string& where);
};

// A drafter for `target` capturing `layer_ids` (eagle3_layer_ids' layout in hsring/model_shape.hpp: 3 fused + the last).
// draft_vocab 0 = the target's vocabulary.
Eagle3Config eagle3_config_for(const ModelShape& target, const std::vector<int>& layer_ids, std::int64_t draft_vocab);

} // namespace hsring::model
