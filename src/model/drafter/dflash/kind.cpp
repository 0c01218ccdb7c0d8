// DFlash's torch-free half (hsring/drafter_kind.hpp): compiled into hsring_config, no torch.
#include "hsring/drafter_kind.hpp"

#include <fmt/format.h>

namespace hsring {

namespace {

// Its [target] layer_ids, or the spread of the target's layers for the drafter's depth.
std::vector<int> captured_layers(const Config& cfg, const ModelShape& shape) {
    return cfg.target.layer_ids.empty()
               ? dflash_layer_ids(static_cast<int>(shape.num_layers), static_cast<int>(cfg.drafter.num_layers))
               : cfg.target.layer_ids;
}

DrafterLines describe(const Config& cfg, const Derived& d, const std::string& in_flight, const std::string& step) {
    std::string ids;
    for (int id : d.layer_ids) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    return {fmt::format("layers [{}]", ids),
            fmt::format("DFlash (type dflash): {} layers, block {}, mask token {}, {}", cfg.drafter.num_layers,
                        cfg.drafter.block_size, d.mask_token_id, in_flight),
            fmt::format("{}, {} anchors per sequence, lr {}, recompute {}, matmul {}, LM head {}", step,
                        cfg.train.num_anchors, cfg.train.lr, to_string(cfg.train.recompute),
                        to_string(cfg.train.matmul), to_string(cfg.train.lm_head))};
}

} // namespace

extern const DrafterKind kDFlashKind;
const DrafterKind kDFlashKind{"dflash", /*drafts_with_mask_token=*/true, /*has_draft_vocab=*/false,
                              /*has_recompute_and_loss_chunk=*/true, &captured_layers, &describe};

} // namespace hsring
