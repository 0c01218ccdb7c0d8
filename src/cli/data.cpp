// hsring data generate CONFIG --out FILE.jsonl: the config's target answers the data set's prompts
// (hsring-model data-generate, which links LibTorch; `hsring` itself never does: docs/architecture.md
// invariant 5).
#include "cli/commands.hpp"
#include "hsring/error.hpp"
#include "hsring/programs.hpp"

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

namespace hsring::cli {

int data(Args args) {
    if (args.size() < 2 || std::string_view(args[1]) != "generate") {
        fmt::print(stderr, "usage: hsring data generate CONFIG --out FILE.jsonl [--prompts FILE.jsonl] [--samples N]\n"
                           "                            [--device cpu|cuda[:I]]\n"
                           "  the config's target answers each prompt (--prompts, default the config's [data] path;\n"
                           "  a prompt is input_ids before the first loss_mask 1) with the [generate] settings and writes\n"
                           "  prompt + response per line, loss_mask 1 over the response (prepare-data's format)\n");
        return args.size() >= 2 && (std::string_view(args[1]) == "--help" || std::string_view(args[1]) == "-h") ? 0 : 2;
    }
    std::string sub = "data-generate";
    std::vector<char*> argv{args[0], sub.data()};
    for (std::size_t i = 2; i < args.size(); ++i) argv.push_back(args[i]);
    exec_program("hsring-model", static_cast<int>(argv.size()), argv.data());
}

} // namespace hsring::cli
