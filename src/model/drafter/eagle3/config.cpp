#include "model/drafter/eagle3/config.hpp"

#include "hsring/error.hpp"
#include "hsring/rope_scaling_json.hpp"
#include "model/drafter/interface/hf_config_reader.hpp"

#include <nlohmann/json.hpp>

#include <set>

namespace hsring::model {

void Eagle3Config::validate(const std::string& where) const {
    if (hidden_size <= 0 || num_heads <= 0 || num_kv_heads <= 0 || head_dim <= 0 || intermediate_size <= 0 ||
        vocab_size <= 0)
        fail("{}: EAGLE-3 drafter sizes must be positive (hidden {}, heads {}/{}, head_dim {}, intermediate {}, "
             "vocab {})", where, hidden_size, num_heads, num_kv_heads, head_dim, intermediate_size, vocab_size);
    if (num_heads % num_kv_heads != 0)
        fail("{}: num_attention_heads {} must be a multiple of num_key_value_heads {}", where, num_heads, num_kv_heads);
    if (head_dim % 2 != 0) fail("{}: head_dim {} must be even (rotary embedding)", where, head_dim);
    if (draft_vocab_size <= 0 || draft_vocab_size > vocab_size)
        fail("{}: draft_vocab_size {} must be in 1..vocab_size ({})", where, draft_vocab_size, vocab_size);
    if (aux_layer_ids.size() != 3)
        fail("{}: an EAGLE-3 drafter fuses 3 target layers, got {}", where, aux_layer_ids.size());
    std::set<int> seen;
    for (int k : aux_layer_ids) {
        if (k < 0 || (num_target_layers > 0 && k >= num_target_layers))
            fail("{}: target layer {} is out of range for a {}-layer target", where, k, num_target_layers);
        if (!seen.insert(k).second) fail("{}: target layer {} is fused twice", where, k);
    }
}

nlohmann::json Eagle3Config::to_hf_json() const {
    const nlohmann::json rope = rope_scaling_json(rope_scaling, rope_theta);
    std::vector<int> hf_ids;  // HF hidden_states indices: the output of layer k is hidden_states[k + 1]
    for (int k : aux_layer_ids) hf_ids.push_back(k + 1);
    return {
        {"architectures", {"LlamaForCausalLMEagle3"}},
        {"model_type", "llama"},
        {"hidden_size", hidden_size},
        {"num_hidden_layers", 1},
        {"num_attention_heads", num_heads},
        {"num_key_value_heads", num_kv_heads},
        {"head_dim", head_dim},
        {"intermediate_size", intermediate_size},
        {"vocab_size", vocab_size},
        {"draft_vocab_size", draft_vocab_size},
        {"max_position_embeddings", max_position_embeddings},
        {"rms_norm_eps", rms_norm_eps},
        {"rope_theta", rope_theta},
        {"rope_scaling", rope_scaling.type.empty() ? nlohmann::json(nullptr) : rope},
        {"hidden_act", "silu"},
        {"attention_bias", false},
        {"mlp_bias", false},
        {"tie_word_embeddings", false},
        {"eagle_config", {{"eagle_aux_hidden_state_layer_ids", hf_ids}, {"use_aux_hidden_state", true}}},
        {"num_target_layers", num_target_layers},
    };
}

Eagle3Config Eagle3Config::from_hf_json(const nlohmann::json& j, const std::string& where) {
    const HfConfigReader r(j, where, "an EAGLE-3 drafter", "LlamaForCausalLMEagle3");
    auto need = [&](const char* key) -> const nlohmann::json& { return r.need(key); };
    auto as_int = [&](const nlohmann::json& v, const std::string& key) { return r.integer(v, key); };
    if (r.int_or("num_hidden_layers", 1) != 1)
        fail("{}: num_hidden_layers must be 1 (one midlayer); hsring reads no deeper EAGLE-3 drafters", where);
    const HfDecoderShape shape = read_hf_decoder_shape(r, 4096, 10000.0);
    Eagle3Config c;
    c.hidden_size = shape.hidden_size;
    c.num_heads = shape.num_heads;
    c.num_kv_heads = shape.num_kv_heads;
    c.head_dim = shape.head_dim;
    c.intermediate_size = shape.intermediate_size;
    c.vocab_size = shape.vocab_size;
    c.draft_vocab_size = r.int_or("draft_vocab_size", c.vocab_size);
    c.max_position_embeddings = shape.max_position_embeddings;
    c.rms_norm_eps = shape.rms_norm_eps;
    c.rope_theta = shape.rope_theta;
    c.rope_scaling = shape.rope_scaling;
    const auto& e = need("eagle_config");
    if (!e.is_object() || !e.contains("eagle_aux_hidden_state_layer_ids") ||
        !e["eagle_aux_hidden_state_layer_ids"].is_array())
        fail("{}: eagle_config has no \"eagle_aux_hidden_state_layer_ids\" list", where);
    for (const auto& k : e["eagle_aux_hidden_state_layer_ids"])
        c.aux_layer_ids.push_back(static_cast<int>(as_int(k, "eagle_aux_hidden_state_layer_ids")) - 1);
    c.num_target_layers = r.int_or("num_target_layers", 0);
    if (c.num_target_layers > 0) c.last_layer_id = static_cast<int>(c.num_target_layers) - 1;
    c.validate(where);
    return c;
}

Eagle3Config eagle3_config_for(const ModelShape& target, const std::vector<int>& layer_ids, std::int64_t draft_vocab) {
    const std::string where = "EAGLE-3 drafter for " + target.source;
    if (layer_ids.size() != 4 || layer_ids[3] != target.num_layers - 1)
        fail("{}: captured layers must be the 3 fused ones and the last ({}), got {} ids", where,
             target.num_layers - 1, layer_ids.size());
    Eagle3Config c;
    c.hidden_size = target.hidden_size;
    c.num_heads = target.num_heads;
    c.num_kv_heads = target.num_kv_heads;
    c.head_dim = target.head_dim;
    c.intermediate_size = target.intermediate_size;
    c.vocab_size = target.vocab_size;
    c.draft_vocab_size = draft_vocab > 0 ? draft_vocab : target.vocab_size;
    c.max_position_embeddings = target.max_position_embeddings;
    c.rms_norm_eps = target.rms_norm_eps;
    c.rope_theta = target.rope_theta;
    c.rope_scaling = target.rope_scaling;
    c.aux_layer_ids.assign(layer_ids.begin(), layer_ids.begin() + 3);
    c.last_layer_id = layer_ids[3];
    c.num_target_layers = target.num_layers;
    c.validate(where);
    return c;
}

} // namespace hsring::model
