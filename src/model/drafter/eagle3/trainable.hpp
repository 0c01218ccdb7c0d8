#pragma once
// EAGLE-3 behind the drafter-type seam (drafter/interface/trainable_drafter.hpp).
#include "model/drafter/eagle3/config.hpp"
#include "model/drafter/eagle3/drafter.hpp"
#include "model/drafter/interface/trainable_drafter.hpp"

#include <memory>

namespace hsring::model {

class Eagle3Trainable final : public TrainableDrafter {
public:
    // Drafts per decode step when none are asked for (decoder's draft_tokens 0).
    static constexpr std::int64_t kDefaultDraftTokens = 5;
    Eagle3Trainable(Eagle3Drafter drafter, Eagle3Config config);
    // A fresh drafter for `spec`: DrafterSpec::layer_ids (3 fused + the last), draft_vocab chosen
    // from token_counts (eagle3/vocab.hpp), the LM head rows from spec.head.
    static std::unique_ptr<TrainableDrafter> create(const DrafterSpec& spec, std::uint64_t seed, at::Device device);
    static std::unique_ptr<TrainableDrafter> load(const std::filesystem::path& dir, at::Device device);

    const char* type() const override { return "eagle3"; }
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

    Eagle3Drafter& drafter() { return drafter_; }
    const Eagle3Config& config() const { return config_; }

private:
    Eagle3Drafter drafter_;
    Eagle3Config config_;
    at::Tensor lm_head_host_, d2t_host_, t2d_host_;  // frozen: copied to the host once, for exports
};

} // namespace hsring::model
