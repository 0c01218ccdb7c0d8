#pragma once
// What every drafter type checks first when asked whether it fits a target
// (TrainableDrafter::misfit): the hidden size and vocabulary it was built for, and the depth of the
// target it was trained on.
#include "hsring/model_shape.hpp"

#include <cstdint>
#include <string>

namespace hsring::model {

// Empty when a drafter of `hidden_size` and `vocab_size`, trained on a target of
// `num_target_layers` layers (0: unknown, not checked), fits `target`; else why not, in words
// naming the target.
std::string target_shape_misfit(std::int64_t hidden_size, std::int64_t vocab_size, std::int64_t num_target_layers,
                                const ModelShape& target);

} // namespace hsring::model
