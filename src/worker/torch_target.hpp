#pragma once
// The real target compute: the frozen Qwen3/Llama model runs the packed batch and each
// captured layer goes straight into the claimed slot: on GPU by an async D2H copy into the
// registered ring (a copy stream that waits for the layer, so copies overlap the later layers'
// compute); on CPU by a memcpy. No staging buffer (DESIGN.md invariant 2).
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
