#pragma once
// RopeScaling <-> the rotary object of a HF config.json ("rope_parameters" in transformers >= 5,
// "rope_scaling" before): one reader and one writer for the target's config.json, the drafter's
// export and its import, so a scaling type read in one place is written the same way in all.
#include "hsring/model_shape.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace hsring {

// `rs`: the object ({"rope_type": "default" | "llama3" | "linear" | "yarn", ...}); `where` names
// the file in errors; yarn's original_max_position_embeddings defaults to max_positions.
RopeScaling parse_rope_scaling(const nlohmann::json& rs, const std::string& where, std::int64_t max_positions);

// The object for `s` (rope_type "default" when none) with rope_theta, as transformers writes it.
nlohmann::json rope_scaling_json(const RopeScaling& s, double rope_theta);

} // namespace hsring
