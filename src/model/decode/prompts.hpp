#pragma once
// The prompts of a JSONL data set (generate, spec-decode, data generate, the target worker's tau
// measurement): each line's input_ids before its first loss_mask 1 (the whole line without an
// answer), request i seeded mix64(seed ^ mix64(i + golden)). Errors name the file and the sample
// (`model` names the target in a too-long message).
#include "hsring/model_shape.hpp"
#include "model/decode/generate.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace hsring::model {

std::vector<GenerateRequest> read_prompts(const std::filesystem::path& prompts, const std::string& model,
                                          const ModelShape& shape, std::uint64_t seed);

} // namespace hsring::model
