#pragma once
// The real target compute: the frozen Qwen3/Llama model runs the packed batch and hands each
// captured layer to the transport (hsring/transport.hpp) as soon as it is computed; the
// transport gets it into the claimed slot while the later layers compute. Each captured layer is
// checked for non-finite values on the device as it goes (rows with one are zeroed before the
// copy): a sample with any is reported to the loop, which rejects it. Between slots it measures
// tau with the same model (spec_probe.hpp) and, with [data] responses = "target", it writes the
// answers first (responses.hpp).
#include "worker/core/context.hpp"
#include "worker/core/target_loop.hpp"

#include <memory>

namespace hsring::worker {

class SpecProbe;

class TorchTarget final : public TargetCompute {
public:
    explicit TorchTarget(Context& ctx);
    ~TorchTarget() override;
    std::vector<std::uint8_t> write(const PackedBatch& batch, WriteSlot& slot) override;
    double last_compute_s() const override { return last_compute_s_; }
    std::vector<std::vector<std::int64_t>> generate_answers(const std::vector<AnswerRequest>& requests) override;
    void between_slots() override;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::unique_ptr<SpecProbe> probe_;  // [eval] spec_every: tau of the committed drafter
    double last_compute_s_ = 0;
};

} // namespace hsring::worker
