#pragma once
// The real target compute: the frozen Qwen3/Llama model runs the packed batch and hands each
// captured layer to the transport (hsring/transport.hpp) as soon as it is computed; the
// transport gets it into the claimed slot while the later layers compute.
#include "worker/context.hpp"
#include "worker/target_loop.hpp"

#include <memory>

namespace hsring::worker {

class TorchTarget final : public TargetCompute {
public:
    explicit TorchTarget(Context& ctx);
    ~TorchTarget() override;
    void write(const PackedBatch& batch, WriteSlot& slot) override;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace hsring::worker
