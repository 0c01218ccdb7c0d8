// EAGLE-3's torch-free half (hsring/drafter_kind.hpp): compiled into hsring_config, no torch.
#include "hsring/drafter_kind.hpp"

#include "hsring/error.hpp"

#include <fmt/format.h>

namespace hsring {

namespace {

// The 3 fused layers (explicit, or low/middle/high) and the target's last layer.
std::vector<int> captured_layers(const Config& cfg, const ModelShape& shape) {
    const std::string file = cfg.file.string();
    if (cfg.drafter.num_layers != 1)
        fail("{}: [drafter] num_layers = {}: an EAGLE-3 drafter has one decoder layer: set num_layers = 1", file,
             cfg.drafter.num_layers);
    if (!cfg.target.layer_ids.empty() && cfg.target.layer_ids.size() != 3)
        fail("{}: [target] layer_ids: an EAGLE-3 drafter fuses 3 target layers (low, middle, high), got {}; the "
             "target's last layer is captured as well, by itself", file, cfg.target.layer_ids.size());
    if (shape.num_layers < 4)
        fail("{}: {} has {} layers: an EAGLE-3 drafter fuses 3 distinct layers below the target's last one, so "
             "the target needs at least 4 (train a DFlash drafter for it: [drafter] type = \"dflash\")", file,
             shape.source, shape.num_layers);
    if (cfg.target.layer_ids.empty() && shape.num_layers < 5)
        fail("{}: {} has {} layers: EAGLE-3's default layers (1, n/2 - 1, n - 4) need at least 5; give [target] "
             "layer_ids = [a, b, c], 3 distinct layers of 0..{} (the last, {}, is captured by itself)", file,
             shape.source, shape.num_layers, shape.num_layers - 2, shape.num_layers - 1);
    for (int id : cfg.target.layer_ids)
        if (id == shape.num_layers - 1)
            fail("{}: [target] layer_ids: layer {} is {}'s last layer, which an EAGLE-3 drafter captures by "
                 "itself besides the 3 it fuses: pick 3 distinct layers of 0..{}", file, id, shape.source,
                 shape.num_layers - 2);
    if (cfg.train.matmul == Matmul::FP8 || cfg.train.lm_head == Matmul::FP8 || cfg.train.recompute == Recompute::Layers)
        fail("{}: [train] matmul / lm_head = \"fp8\" and recompute = \"layers\" are DFlash's: an EAGLE-3 drafter "
             "trains in the compute dtype without recomputation (set them to \"bf16\" / \"none\")", file);
    if (cfg.drafter.draft_vocab > shape.vocab_size)
        fail("{}: [drafter] draft_vocab {} exceeds the target's vocabulary ({})", file, cfg.drafter.draft_vocab,
             shape.vocab_size);
    return eagle3_layer_ids(static_cast<int>(shape.num_layers), cfg.target.layer_ids);
}

DrafterLines describe(const Config& cfg, const Derived& d, const std::string& in_flight, const std::string& step) {
    std::string ids, fused;
    for (int id : d.layer_ids) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    for (std::size_t i = 0; i + 1 < d.layer_ids.size(); ++i)
        fused += (fused.empty() ? "" : ", ") + std::to_string(d.layer_ids[i]);
    const std::int64_t vocab = cfg.drafter.draft_vocab > 0 ? cfg.drafter.draft_vocab : d.target.vocab_size;
    return {fmt::format("layers [{}] = 3 fused [{}] + the last ({})", ids, fused, d.layer_ids.back()),
            fmt::format("EAGLE-3 (type eagle3): 1 Llama layer over the 3 fused layers, {} training-time-test "
                        "steps, draft vocabulary {} of {} tokens{}, {}",
                        cfg.drafter.ttt_steps, vocab, d.target.vocab_size,
                        vocab < d.target.vocab_size ? " (the most frequent in [data] path)" : "", in_flight),
            fmt::format("{}, lr {}, step k's loss weighs ttt_decay^k = {}^k", step, cfg.train.lr, cfg.train.ttt_decay)};
}

} // namespace

extern const DrafterKind kEagle3Kind;
const DrafterKind kEagle3Kind{"eagle3", /*drafts_with_mask_token=*/false, /*has_draft_vocab=*/true,
                              /*has_recompute_and_loss_chunk=*/false, &captured_layers, &describe};

} // namespace hsring
