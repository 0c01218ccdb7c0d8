// hsring-model check-drafter DIR: loads an exported DFlash drafter (config.json +
// model.safetensors) the way a resumed run or a user would, runs one forward over random
// context, and prints what it found. Exit 0 only if it loads and the output is finite.
#include "hsring/error.hpp"
#include "model/dflash_blocks.hpp"
#include "model/dflash_export.hpp"
#include "model/tools/commands.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

namespace hsring::model::tools {

int check_drafter(int argc, char** argv) {
    if (argc != 2) fail("usage: hsring-model check-drafter DIR (an exported DFlash drafter)");
    const std::filesystem::path dir = argv[1];
    auto [drafter, cfg] = import_dflash(dir, at::kCPU);
    at::NoGradGuard no_grad;
    // Two short sequences of random tokens, random captured layers, blocks at two anchors each.
    const std::int64_t len = std::max<std::int64_t>(cfg.block_size + 4, 24), total = 2 * len;
    at::Tensor tokens = at::randint(std::min<std::int64_t>(cfg.vocab_size, 1000), {total}, at::kLong);
    at::Tensor mask = at::ones({total});
    std::vector<std::int64_t> cu{0, len, total};
    DFlashBlocks blocks = dflash_blocks_at(tokens, mask, cu, cfg.block_size, cfg.mask_token_id,
                                           {2, len / 2, len + 3, len + len / 2}, 0.0);
    at::Tensor embed = at::randn({std::min<std::int64_t>(cfg.vocab_size, 1000) + cfg.mask_token_id + 1, cfg.hidden_size}) * 0.02;
    DFlashInputs in;
    in.context = at::randn({cfg.num_context_layers(), total, cfg.hidden_size});
    in.block_embeds = embed.index_select(0, blocks.block_tokens);
    in.blocks = &blocks;
    at::Tensor out = drafter->forward(in);
    std::int64_t params = 0;
    for (const auto& p : drafter->parameters()) params += p.numel();
    const bool finite = at::isfinite(out).all().item<bool>();
    fmt::print("{}: DFlash drafter, {} layers, hidden {}, block {}, mask token {}, target layers [{}], {:.2f} M "
               "parameters; forward over {} block rows: {}\n",
               dir.string(), cfg.num_layers, cfg.hidden_size, cfg.block_size, cfg.mask_token_id,
               fmt::join(cfg.target_layer_ids, ","), double(params) / 1e6, out.size(0), finite ? "finite" : "NOT FINITE");
    return finite ? 0 : 1;
}

} // namespace hsring::model::tools
