#include "model/drafter/interface/target_fit.hpp"

#include <fmt/format.h>

namespace hsring::model {

std::string target_shape_misfit(std::int64_t hidden_size, std::int64_t vocab_size, std::int64_t num_target_layers,
                                const ModelShape& t) {
    if (hidden_size != t.hidden_size)
        return fmt::format("the drafter's hidden_size {} does not match the target {}'s {}", hidden_size, t.source,
                           t.hidden_size);
    if (vocab_size != t.vocab_size)
        return fmt::format("the drafter's vocab_size {} does not match the target {}'s {}", vocab_size, t.source,
                           t.vocab_size);
    if (num_target_layers > 0 && num_target_layers != t.num_layers)
        return fmt::format("the drafter was trained on a {}-layer target (num_target_layers) but {} has {} layers",
                           num_target_layers, t.source, t.num_layers);
    return {};
}

} // namespace hsring::model
