// hsring-model: LibTorch model utilities. `hsring model ...` execs this program.
#include "hsring/error.hpp"
#include "model/tools/commands.hpp"

#include <fmt/format.h>

#include <cstring>
#include <exception>

namespace {

void usage() {
    fmt::print(stderr,
               "usage: hsring-model SUBCOMMAND [ARGS...]\n"
               "subcommands:\n"
               "  dump-hidden MODEL --layers 1,9,17|all --tokens TOKENS.json --out HS.safetensors\n"
               "              [--seed N] [--device cpu|cuda[:I]] [--dtype fp32|bf16] [--logits]\n"
               "      Runs the target (a HF model directory or preset:NAME) over TOKENS.json, a list of\n"
               "      token-id lists packed into one batch, and writes each captured layer K as\n"
               "      `layer.K` [total_tokens, hidden] fp32 (layer K = HF hidden_states[K+1]).\n"
               "  check-drafter DIR\n"
               "      Loads an exported DFlash drafter (config.json + model.safetensors) and runs one\n"
               "      forward; exit 0 if it loads and the output is finite.\n");
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
        usage();
        return argc < 2 ? 2 : 0;
    }
    try {
        if (!std::strcmp(argv[1], "dump-hidden")) return hsring::model::tools::dump_hidden(argc - 1, argv + 1);
        if (!std::strcmp(argv[1], "check-drafter")) return hsring::model::tools::check_drafter(argc - 1, argv + 1);
        fmt::print(stderr, "hsring-model: unknown subcommand '{}'\n", argv[1]);
        usage();
        return 2;
    } catch (const hsring::Error& e) {
        fmt::print(stderr, "hsring-model: {}\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        fmt::print(stderr, "hsring-model: internal error: {}\n", e.what());
        return 1;
    }
}
