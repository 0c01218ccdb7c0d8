// The DFlash drafter can learn: on one packed batch of the demo data (6 samples) with the tiny target's
// captured layers, AdamW drives the loss down and block accuracy up. A broken gradient path, a
// mask that hides the context, or frozen pieces that leak into training show up here.
#include "hsring/dataset.hpp"
#include "model/drafter/dflash/config.hpp"
#include "model/drafter/dflash/drafter.hpp"
#include "model/drafter/dflash/loss.hpp"
#include "model/target/target.hpp"
#include "model/ops/tensor_init.hpp"

#include <doctest/doctest.h>
#include <torch/optim/adamw.h>

#include <cstdlib>
#include <filesystem>

using namespace hsring;

TEST_CASE("the drafter fits a batch of the demo data") {
    const char* root = std::getenv("HSRING_SOURCE_ROOT");
    REQUIRE(root);
    ModelShape shape = preset_shape("tiny");
    auto data = data::Dataset::load(std::filesystem::path(root) / "data/demo.jsonl", {OnBadLine::Fail, 0, 512});
    // A packed batch: the first 12 samples.
    std::vector<std::int64_t> cu{0};
    std::vector<std::int64_t> tok;
    std::vector<float> mask;
    for (std::size_t i = 0; i < 6; ++i) {
        for (auto t : data.tokens(i)) tok.push_back(t);
        for (auto m : data.loss_mask(i)) mask.push_back(m);
        cu.push_back(static_cast<std::int64_t>(tok.size()));
    }
    at::Tensor tokens = at::tensor(tok, at::kLong), loss_mask = at::tensor(mask);
    const std::vector<int> layers = dflash_layer_ids(static_cast<int>(shape.num_layers), 1);
    auto target = model::TargetModel::load(shape, at::kCPU, at::kFloat, 7);
    std::vector<at::Tensor> captured;
    target.forward(tokens, cu, layers, [&](std::size_t, const at::Tensor& h) { captured.push_back(h.clone()); });
    model::DFlashBatch batch{at::stack(captured).to(at::kBFloat16), tokens, loss_mask, cu};
    auto cfg = model::dflash_config_for(shape, 1, 8, *shape.mask_token_id, layers);
    model::DFlashDrafter drafter(cfg, 7, at::kCPU);
    auto head = model::load_target_head(shape, at::kCPU, at::kFloat, 7);
    torch::optim::AdamW opt(drafter->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.0));
    model::DFlashLossOptions opts;
    opts.num_anchors = 32;
    opts.gamma = 4.0;
    double first = 0, last = 0, acc_first = 0, acc_last = 0;
    const int steps = 60;
    for (int step = 0; step < steps; ++step) {
        at::Generator gen = model::cpu_generator(static_cast<std::uint64_t>(step));
        auto r = model::dflash_loss(drafter, head, batch, opts, gen);
        opt.zero_grad();
        r.loss.backward();
        opt.step();
        const double acc = (r.correct.sum() / r.counted.sum()).item<double>();
        if (step < 5) { first += r.loss.item<double>() / 5; acc_first += acc / 5; }
        if (step >= steps - 5) { last += r.loss.item<double>() / 5; acc_last += acc / 5; }
    }
    MESSAGE("loss " << first << " -> " << last << ", accuracy " << acc_first << " -> " << acc_last);
    CHECK(last < first - 1.0);
    CHECK(acc_last > acc_first + 0.1);
}
