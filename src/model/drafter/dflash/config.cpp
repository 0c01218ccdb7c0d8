#include "model/drafter/dflash/config.hpp"

#include "hsring/error.hpp"
#include "hsring/rope_scaling_json.hpp"
#include "model/drafter/interface/hf_config_reader.hpp"

#include <nlohmann/json.hpp>

namespace hsring::model {

void DFlashConfig::validate(const std::string& where) const {
    if (hidden_size <= 0 || num_layers <= 0 || num_heads <= 0 || num_kv_heads <= 0 || head_dim <= 0 ||
        intermediate_size <= 0 || vocab_size <= 0)
        fail("{}: drafter sizes must be positive (hidden {}, layers {}, heads {}/{}, head_dim {}, intermediate {}, "
             "vocab {})",
             where, hidden_size, num_layers, num_heads, num_kv_heads, head_dim, intermediate_size, vocab_size);
    if (num_heads % num_kv_heads != 0)
        fail("{}: num_attention_heads {} must be a multiple of num_key_value_heads {}", where, num_heads, num_kv_heads);
    if (head_dim % 2 != 0) fail("{}: head_dim {} must be even (rotary embedding)", where, head_dim);
    if (block_size < 2) fail("{}: block_size {} must be at least 2 (slot 0 holds the anchor)", where, block_size);
    if (mask_token_id < 0 || mask_token_id >= vocab_size)
        fail("{}: mask_token_id {} must be a row of the target's embedding [0, {})", where, mask_token_id, vocab_size);
    if (target_layer_ids.empty()) fail("{}: target_layer_ids must not be empty", where);
    for (int k : target_layer_ids)
        if (k < 0 || (num_target_layers > 0 && k >= num_target_layers))
            fail("{}: target layer id {} is out of range for a {}-layer target", where, k, num_target_layers);
}

nlohmann::json DFlashConfig::to_hf_json() const {
    const nlohmann::json rope = rope_scaling_json(rope_scaling, rope_theta);
    const nlohmann::json legacy_scaling = rope_scaling.type.empty() ? nlohmann::json(nullptr) : rope;
    return {
        {"architectures", {"DFlashDraftModel"}},
        {"model_type", "qwen3"},
        {"hidden_size", hidden_size},
        {"num_hidden_layers", num_layers},
        {"num_attention_heads", num_heads},
        {"num_key_value_heads", num_kv_heads},
        {"head_dim", head_dim},
        {"intermediate_size", intermediate_size},
        {"vocab_size", vocab_size},
        {"max_position_embeddings", max_position_embeddings},
        {"rms_norm_eps", rms_norm_eps},
        // Both spellings: transformers >= 5 reads rope_parameters, older readers rope_theta/rope_scaling.
        {"rope_theta", rope_theta},
        {"rope_scaling", legacy_scaling},
        {"rope_parameters", rope},
        {"hidden_act", "silu"},
        {"attention_bias", false},
        {"attention_dropout", 0.0},
        {"tie_word_embeddings", false},
        {"use_cache", false},
        // Explicit full attention for readers that index layer_types without defaulting it.
        {"layer_types", std::vector<std::string>(static_cast<std::size_t>(num_layers), "full_attention")},
        {"use_sliding_window", false},
        {"sliding_window", nullptr},
        {"max_window_layers", num_layers},
        {"block_size", block_size},
        {"num_target_layers", num_target_layers},
        {"dflash_config",
         {{"target_layer_ids", target_layer_ids}, {"mask_token_id", mask_token_id}, {"block_size", block_size}}},
        // transformers' "REPO--module.Class" form: the code comes from that hub repo (see the header).
        {"auto_map", {{"AutoModel", std::string(kDFlashCodeRepo) + "--dflash.DFlashDraftModel"}}},
    };
}

DFlashConfig DFlashConfig::from_hf_json(const nlohmann::json& j, const std::string& where) {
    const HfConfigReader r(j, where, "a DFlash drafter", "DFlashDraftModel");
    auto need = [&](const char* key) -> const nlohmann::json& { return r.need(key); };
    auto as_int = [&](const nlohmann::json& v, const std::string& key) { return r.integer(v, key); };
    const HfDecoderShape shape = read_hf_decoder_shape(r, 40960, 1e6);
    DFlashConfig c;
    c.hidden_size = shape.hidden_size;
    c.num_layers = r.need_int("num_hidden_layers");
    c.num_heads = shape.num_heads;
    c.num_kv_heads = shape.num_kv_heads;
    c.head_dim = shape.head_dim;
    c.intermediate_size = shape.intermediate_size;
    c.vocab_size = shape.vocab_size;
    c.max_position_embeddings = shape.max_position_embeddings;
    c.rms_norm_eps = shape.rms_norm_eps;
    c.rope_theta = shape.rope_theta;
    c.rope_scaling = shape.rope_scaling;
    const auto& d = need("dflash_config");
    if (!d.is_object()) fail("{}: \"dflash_config\" must be an object", where);
    c.block_size = d.contains("block_size") ? as_int(d["block_size"], "dflash_config.block_size")
                                            : as_int(need("block_size"), "block_size");
    if (!d.contains("mask_token_id")) fail("{}: dflash_config has no \"mask_token_id\"", where);
    c.mask_token_id = as_int(d["mask_token_id"], "dflash_config.mask_token_id");
    if (!d.contains("target_layer_ids") || !d["target_layer_ids"].is_array())
        fail("{}: dflash_config has no \"target_layer_ids\" list", where);
    for (const auto& k : d["target_layer_ids"])
        c.target_layer_ids.push_back(static_cast<int>(as_int(k, "dflash_config.target_layer_ids")));
    c.num_target_layers = r.int_or("num_target_layers", 0);
    c.validate(where);
    return c;
}

DFlashConfig dflash_config_for(const ModelShape& target, int num_layers, int block_size, std::int64_t mask_token_id,
                               std::vector<int> target_layer_ids) {
    DFlashConfig c;
    c.hidden_size = target.hidden_size;
    c.num_layers = num_layers;
    c.num_heads = target.num_heads;
    c.num_kv_heads = target.num_kv_heads;
    c.head_dim = target.head_dim;
    c.intermediate_size = target.intermediate_size;
    c.vocab_size = target.vocab_size;
    c.max_position_embeddings = target.max_position_embeddings;
    c.rms_norm_eps = target.rms_norm_eps;
    c.rope_theta = target.rope_theta;
    // The target's scaling, YaRN included: the DFlash model code's Qwen3RotaryEmbedding applies
    // it (with YaRN's attention factor on cos/sin), as the published gpt-oss drafters have it.
    c.rope_scaling = target.rope_scaling;
    c.block_size = block_size;
    if (mask_token_id < 0) {
        if (!target.mask_token_id)
            fail("target {} has no known DFlash mask token: set [drafter] mask_token_id to an unused embedding row",
                 target.source);
        mask_token_id = *target.mask_token_id;
    }
    c.mask_token_id = mask_token_id;
    c.target_layer_ids = target_layer_ids.empty()
                             ? dflash_layer_ids(static_cast<int>(target.num_layers), num_layers)
                             : std::move(target_layer_ids);
    c.num_target_layers = target.num_layers;
    c.validate("drafter for " + target.source);
    return c;
}

} // namespace hsring::model
