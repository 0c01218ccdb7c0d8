#include "model/drafter/dflash/trainable.hpp"

#include "hsring/error.hpp"
#include "model/drafter/dflash/decode.hpp"
#include "model/drafter/dflash/eval.hpp"
#include "model/drafter/dflash/export.hpp"
#include "model/drafter/dflash/loss.hpp"
#include "model/drafter/interface/target_fit.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace hsring::model {
namespace {

DFlashLossOptions dflash_options(const DrafterTrainOptions& o) {
    DFlashLossOptions d;
    d.num_anchors = o.num_anchors;
    d.gamma = o.gamma;
    d.chunk = o.chunk;
    d.recompute_layers = o.recompute_layers;
    d.fp8_matmul = o.fp8_matmul;
    d.fp8_lm_head = o.fp8_lm_head;
    return d;
}

} // namespace

DFlashTrainable::DFlashTrainable(DFlashDrafter drafter, DFlashConfig config)
    : drafter_(std::move(drafter)), config_(std::move(config)) {}

std::unique_ptr<TrainableDrafter> DFlashTrainable::create(const DrafterSpec& spec, std::uint64_t seed,
                                                          at::Device device) {
    DFlashConfig c = dflash_config_for(spec.target, spec.num_layers, spec.block_size, spec.mask_token_id, spec.layer_ids);
    return std::make_unique<DFlashTrainable>(DFlashDrafter(c, seed, device), c);
}

std::unique_ptr<TrainableDrafter> DFlashTrainable::load(const std::filesystem::path& dir, at::Device device) {
    auto [d, c] = import_dflash(dir, device);
    return std::make_unique<DFlashTrainable>(d, c);
}

DrafterLoss DFlashTrainable::loss(const TargetHead& head, const DrafterBatch& batch, const DrafterTrainOptions& options,
                                  at::Generator& gen) {
    DFlashLossResult r = dflash_loss(drafter_, head, batch, dflash_options(options), gen);
    DrafterLoss out;
    out.loss_sum = r.loss_sum;
    out.weight_sum = r.weight_sum;
    out.correct = r.correct;
    out.counted = r.counted;
    out.units = r.num_blocks;
    return out;
}

DrafterEvalSums DFlashTrainable::evaluate(const TargetHead& head, const DrafterBatch& batch,
                                          const std::vector<std::uint64_t>& sample_ids, std::uint64_t seed,
                                          const DrafterTrainOptions& options) {
    return evaluate_dflash(drafter_, head, batch, sample_ids, seed, dflash_options(options));
}

DrafterExporter DFlashTrainable::exporter() const {
    return [config = config_](const std::filesystem::path& dir, const std::map<std::string, at::Tensor>& parameters,
                              at::ScalarType dtype) { export_dflash(dir, parameters, config, dtype); };
}

std::string DFlashTrainable::mismatch(const DrafterSpec& spec) const {
    if (spec.type != "dflash") return fmt::format("it is a DFlash drafter, the run trains [drafter] type = \"{}\"", spec.type);
    if (config_.hidden_size != spec.target.hidden_size)
        return fmt::format("its hidden size {} is not the target's {}", config_.hidden_size, spec.target.hidden_size);
    if (config_.target_layer_ids != spec.layer_ids)
        return fmt::format("its target layers [{}] are not the run's [target] layer_ids [{}]",
                           fmt::join(config_.target_layer_ids, ", "), fmt::join(spec.layer_ids, ", "));
    return {};
}

std::string DFlashTrainable::describe() const {
    return fmt::format("DFlash drafter, {} layers, block {}", config_.num_layers, config_.block_size);
}

std::vector<int> DFlashTrainable::captured_layers(const ModelShape&) const { return config_.target_layer_ids; }

std::string DFlashTrainable::misfit(const ModelShape& t) const {
    const DFlashConfig& c = config_;
    if (std::string why = target_shape_misfit(c.hidden_size, c.vocab_size, c.num_target_layers, t); !why.empty())
        return why;
    if (c.target_layer_ids.empty()) return "the drafter has no target layers (dflash_config.target_layer_ids)";
    for (int k : c.target_layer_ids)
        if (k < 0 || k >= t.num_layers)
            return fmt::format("target layer id {} (dflash_config.target_layer_ids) is out of range for {} ({} layers)",
                               k, t.source, t.num_layers);
    if (c.mask_token_id < 0 || c.mask_token_id >= t.vocab_size)
        return fmt::format("the drafter's mask_token_id {} is outside the vocabulary of {} ({} tokens)", c.mask_token_id,
                           t.source, t.vocab_size);
    if (c.block_size < 2) return fmt::format("the drafter's block_size {} drafts nothing", c.block_size);
    return {};
}

std::unique_ptr<DecodeDrafter> DFlashTrainable::decoder(const ModelShape& target, const TargetHead& head,
                                                        std::int64_t rows, std::int64_t tokens, at::Device device,
                                                        at::ScalarType dtype, std::int64_t draft_tokens,
                                                        bool graphs) {
    if (const std::string why = misfit(target); !why.empty()) fail("speculative decoding: {}", why);
    // A DFlash block drafts all its slots at once, and a shorter block is not a prefix of the full
    // one: block - 1 drafts per step is the only choice.
    if (draft_tokens != 0 && draft_tokens != config_.block_size - 1)
        fail("speculative decoding: a DFlash drafter drafts its whole block ({} tokens, block_size {}) per step, not "
             "{}: draft tokens are for EAGLE-3 chains (leave them unset)",
             config_.block_size - 1, config_.block_size, draft_tokens);
    const std::int64_t capacity = std::min(tokens + config_.block_size, target.max_position_embeddings);
    return std::make_unique<DFlashDecodeDrafter>(drafter_, head, rows, capacity, device, dtype, graphs);
}

} // namespace hsring::model
