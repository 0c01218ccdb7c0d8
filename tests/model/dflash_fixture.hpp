#pragma once
// A small DFlash setup shared by the drafter tests: the tiny target, its captured hidden states
// for a packed batch of three sequences, and a drafter reading three of its layers.
#include "hsring/model_shape.hpp"
#include "model/drafter/dflash/config.hpp"
#include "model/drafter/dflash/drafter.hpp"
#include "model/drafter/dflash/loss.hpp"
#include "model/target/target.hpp"
#include "model/ops/tensor_init.hpp"

#include <ATen/ATen.h>

namespace hsring::test {

struct DFlashFixture {
    ModelShape shape = preset_shape("tiny");
    model::DFlashConfig config;
    model::TargetHead head;
    model::DFlashBatch batch;

    explicit DFlashFixture(at::Device device = at::kCPU, std::vector<std::int64_t> lengths = {23, 9, 17},
                           std::int64_t block_size = 4) {
        config = model::dflash_config_for(shape, 2, static_cast<int>(block_size), -1, {1, 4, 6});
        auto target = model::TargetModel::load(shape, device, at::kFloat, 5);
        head = target.head();
        at::Generator g = model::cpu_generator(99);
        std::vector<at::Tensor> toks;
        batch.cu_seqlens = {0};
        for (auto len : lengths) {
            toks.push_back(at::randint(shape.vocab_size - 1, {len}, g, at::kLong));
            batch.cu_seqlens.push_back(batch.cu_seqlens.back() + len);
        }
        batch.tokens = at::cat(toks).to(device);
        // ~75% of the tokens are trained on.
        batch.loss_mask = (at::rand({batch.cu_seqlens.back()}, g) < 0.75).to(at::kFloat).to(device);
        const auto& ids = config.target_layer_ids;
        std::vector<at::Tensor> layers(ids.size());
        target.forward(batch.tokens, batch.cu_seqlens, ids, [&](std::size_t i, const at::Tensor& h) { layers[i] = h; });
        batch.hidden = at::stack(layers);  // [L, T, H]
    }

    model::DFlashDrafter drafter(std::uint64_t seed = 3, at::Device device = at::kCPU) const {
        return model::DFlashDrafter(config, seed, device);
    }
};

// One loss at caller-chosen blocks and the gradient it gives every drafter parameter: the
// gradients are zeroed first, loss_sum is back-propagated, and each gradient is copied to the CPU
// in fp64 (comparable across devices and runs).
struct LossAndGrads {
    double loss = 0, loss_sum = 0;
    std::vector<at::Tensor> grads;
};

inline LossAndGrads loss_and_grads(model::DFlashDrafter& drafter, const model::TargetHead& head,
                                   const model::DFlashBatch& batch, const model::DFlashBlocks& blocks,
                                   const model::DFlashLossOptions& opt) {
    drafter->zero_grad();
    model::DFlashLossResult r = model::dflash_loss_for_blocks(drafter, head, batch, blocks, opt);
    r.loss_sum.backward();
    LossAndGrads out{r.loss.item<double>(), r.loss_sum.item<double>(), {}};
    for (auto& p : drafter->parameters()) out.grads.push_back(p.grad().to(at::kCPU, at::kDouble));
    return out;
}

} // namespace hsring::test
