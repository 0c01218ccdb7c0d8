#pragma once
// The tokens that end a generated response, without torch (config checks need them before any
// model is built): a HF model directory's eos ids, or what [generate] stop_token_ids says.
#include "hsring/config.hpp"
#include "hsring/model_shape.hpp"

#include <cstdint>
#include <vector>

namespace hsring {

// The stop tokens a HF model directory declares: generation_config.json's eos_token_id (an int
// or a list), then config.json's, without repeats; none for a preset or where neither says.
std::vector<std::int64_t> model_stop_tokens(const ModelShape& shape);

// [generate] stop_token_ids when the key is set (an explicit [] = none: always max_new_tokens),
// else the model's eos ids. Throws hsring::Error naming the config file and the fix when the
// model declares none or one lies outside its vocabulary.
std::vector<std::int64_t> response_stop_tokens(const Config& cfg, const ModelShape& shape);

} // namespace hsring
