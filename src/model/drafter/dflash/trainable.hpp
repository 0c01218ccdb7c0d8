#pragma once
// DFlash behind the drafter-type seam (drafter/interface/trainable_drafter.hpp): the same
// drafter, loss, evaluation and export the worker called directly before, unchanged in numbers.
#include "model/drafter/dflash/config.hpp"
#include "model/drafter/dflash/drafter.hpp"
#include "model/drafter/interface/trainable_drafter.hpp"

#include <memory>

namespace hsring::model {

class DFlashTrainable final : public TrainableDrafter {
public:
    DFlashTrainable(DFlashDrafter drafter, DFlashConfig config);
    // A fresh drafter for `spec` (DrafterSpec::num_layers, block_size, mask_token_id, layer_ids).
    static std::unique_ptr<TrainableDrafter> create(const DrafterSpec& spec, std::uint64_t seed, at::Device device);
    // An exported (or checkpointed) DFlash directory.
    static std::unique_ptr<TrainableDrafter> load(const std::filesystem::path& dir, at::Device device);

    const char* type() const override { return "dflash"; }
    torch::nn::Module& module() override { return *drafter_; }
    DrafterLoss loss(const TargetHead& head, const DrafterBatch& batch, const DrafterTrainOptions& options,
                     at::Generator& gen) override;
    DrafterEvalSums evaluate(const TargetHead& head, const DrafterBatch& batch,
                             const std::vector<std::uint64_t>& sample_ids, std::uint64_t seed,
                             const DrafterTrainOptions& options) override;
    DrafterExporter exporter() const override;
    std::string mismatch(const DrafterSpec& spec) const override;
    std::string describe() const override;
    std::string misfit(const ModelShape& target) const override;
    std::vector<int> captured_layers(const ModelShape& target) const override;
    std::unique_ptr<DecodeDrafter> decoder(const ModelShape& target, const TargetHead& head, std::int64_t rows,
                                           std::int64_t tokens, at::Device device, at::ScalarType dtype,
                                           std::int64_t draft_tokens, bool graphs) override;

    DFlashDrafter& drafter() { return drafter_; }
    const DFlashConfig& config() const { return config_; }

private:
    DFlashDrafter drafter_;
    DFlashConfig config_;
};

} // namespace hsring::model
