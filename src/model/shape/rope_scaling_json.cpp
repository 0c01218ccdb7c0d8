// The rotary object of a HF config.json (see hsring/rope_scaling_json.hpp).
#include "hsring/rope_scaling_json.hpp"

#include "hsring/error.hpp"

#include <optional>

namespace hsring {

RopeScaling parse_rope_scaling(const nlohmann::json& rs, const std::string& where, std::int64_t max_positions) {
    RopeScaling s;
    const std::string type = rs.value("rope_type", rs.value("type", std::string("default")));
    if (type == "default") return s;
    auto number = [&](const char* key, double fallback) {
        if (!rs.contains(key) || rs[key].is_null()) return fallback;
        if (!rs[key].is_number()) fail("{}: rope \"{}\" must be a number, got {}", where, key, rs[key].dump());
        return rs[key].get<double>();
    };
    auto optional_number = [&](const char* key) -> std::optional<double> {
        if (!rs.contains(key) || rs[key].is_null()) return std::nullopt;
        return number(key, 0.0);
    };
    s.type = type;
    s.factor = number("factor", 1.0);
    if (type == "llama3" || type == "linear") {
        s.low_freq_factor = number("low_freq_factor", 1.0);
        s.high_freq_factor = number("high_freq_factor", 4.0);
        s.original_max_position_embeddings =
            static_cast<std::int64_t>(number("original_max_position_embeddings", 8192));
        return s;
    }
    if (type == "yarn") {
        s.beta_fast = number("beta_fast", 32.0);
        s.beta_slow = number("beta_slow", 1.0);
        if (rs.contains("truncate") && !rs["truncate"].is_null()) {
            if (!rs["truncate"].is_boolean()) fail("{}: rope \"truncate\" must be true or false", where);
            s.truncate = rs["truncate"].get<bool>();
        }
        s.original_max_position_embeddings =
            static_cast<std::int64_t>(number("original_max_position_embeddings", static_cast<double>(max_positions)));
        s.attention_factor = optional_number("attention_factor");
        s.mscale = optional_number("mscale");
        s.mscale_all_dim = optional_number("mscale_all_dim");
        if (!(s.factor >= 1.0)) fail("{}: rope \"factor\" {} must be >= 1 for yarn", where, s.factor);
        return s;
    }
    fail("{}: rope scaling type \"{}\" is not supported (supported: llama3, linear, yarn)", where, type);
}

nlohmann::json rope_scaling_json(const RopeScaling& s, double rope_theta) {
    nlohmann::json rope = {{"rope_type", "default"}, {"rope_theta", rope_theta}};
    if (s.type.empty()) return rope;
    rope["rope_type"] = s.type;
    rope["factor"] = s.factor;
    if (s.type == "llama3") {
        rope["low_freq_factor"] = s.low_freq_factor;
        rope["high_freq_factor"] = s.high_freq_factor;
        rope["original_max_position_embeddings"] = s.original_max_position_embeddings;
    }
    if (s.type == "yarn") {
        rope["beta_fast"] = s.beta_fast;
        rope["beta_slow"] = s.beta_slow;
        rope["truncate"] = s.truncate;
        rope["original_max_position_embeddings"] = s.original_max_position_embeddings;
        if (s.attention_factor) rope["attention_factor"] = *s.attention_factor;
        if (s.mscale) rope["mscale"] = *s.mscale;
        if (s.mscale_all_dim) rope["mscale_all_dim"] = *s.mscale_all_dim;
    }
    return rope;
}

} // namespace hsring
