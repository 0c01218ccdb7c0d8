#include "model/drafter/interface/hf_config_reader.hpp"

#include "hsring/error.hpp"
#include "hsring/rope_scaling_json.hpp"

namespace hsring::model {

HfConfigReader::HfConfigReader(const nlohmann::json& j, std::string where, std::string kind, const char* architecture)
    : j_(j), where_(std::move(where)), kind_(std::move(kind)) {
    if (!j_.is_object()) fail("{}: not a JSON object", where_);
    bool listed = false;
    if (j_.contains("architectures") && j_["architectures"].is_array())
        for (const auto& a : j_["architectures"]) listed = listed || a == architecture;
    if (!listed) fail("{}: architectures must list \"{}\"", where_, architecture);
}

const nlohmann::json& HfConfigReader::need(const char* key) const {
    if (!j_.contains(key)) fail("{}: missing key \"{}\" (is this {}'s config.json?)", where_, key, kind_);
    return j_.at(key);
}

std::int64_t HfConfigReader::integer(const nlohmann::json& v, const std::string& key) const {
    if (!v.is_number_integer()) fail("{}: \"{}\" must be an integer", where_, key);
    return v.get<std::int64_t>();
}

std::int64_t HfConfigReader::int_or(const char* key, std::int64_t fallback) const {
    return j_.contains(key) && !j_[key].is_null() ? integer(j_[key], key) : fallback;
}

HfDecoderShape read_hf_decoder_shape(const HfConfigReader& r, std::int64_t default_max_positions, double default_theta) {
    const nlohmann::json& j = r.json();
    HfDecoderShape s;
    s.hidden_size = r.need_int("hidden_size");
    s.num_heads = r.need_int("num_attention_heads");
    s.num_kv_heads = r.int_or("num_key_value_heads", s.num_heads);
    s.head_dim = r.int_or("head_dim", s.num_heads > 0 ? s.hidden_size / s.num_heads : 0);
    s.intermediate_size = r.need_int("intermediate_size");
    s.vocab_size = r.need_int("vocab_size");
    s.max_position_embeddings = j.value("max_position_embeddings", default_max_positions);
    s.rms_norm_eps = j.value("rms_norm_eps", 1e-6);
    s.rope_theta = j.value("rope_theta", default_theta);
    const nlohmann::json* rs = nullptr;
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
        rs = &j["rope_parameters"];
        s.rope_theta = rs->value("rope_theta", s.rope_theta);
    } else if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
        rs = &j["rope_scaling"];
    }
    if (rs) s.rope_scaling = parse_rope_scaling(*rs, r.where(), s.max_position_embeddings);
    return s;
}

} // namespace hsring::model
