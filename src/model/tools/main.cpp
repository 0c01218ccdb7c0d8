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
               "  check-drafter DRAFTER_DIR --target MODEL --data FILE.jsonl [--samples N] [--num-anchors K]\n"
               "                [--seed S] [--gamma G] [--device cpu|cuda[:I]] [--dump OUT.safetensors] [--json]\n"
               "      Evaluates an exported DFlash drafter: the target (HF directory or preset:NAME; --seed\n"
               "      = the run's [run] seed for a preset, default 1234) computes the captured layers of\n"
               "      the first N samples (default all), the drafter drafts blocks at up to K anchors per\n"
               "      sample (default 512; the training rule, drawn from S and the sample's index), and\n"
               "      it prints the loss (weights exp(-(k-1)/G), default G 7), the accuracy per block\n"
               "      position and the acceptance-length estimate; --json: one JSON object. --dump: the\n"
               "      logits of every block and the inputs that reproduce them (src/model/README.md).\n"
               "  check-drafter DRAFTER_DIR [--json]\n"
               "      Smoke check only: loads the drafter and runs one forward over random inputs.\n"
               "  generate MODEL --prompts FILE.jsonl [--max-new-tokens N] [--temperature T] [--top-p P]\n"
               "           [--seed S] [--batch B] [--device cpu|cuda[:I]] [--preset-seed N] [--json]\n"
               "      Generates from the target (HF directory or preset:NAME, random weights from --preset-seed,\n"
               "      default 1234) with a KV cache, B prompts in flight (default 16): greedy by default, else\n"
               "      temperature/top-p sampling, prompt i seeded from S and i. A prompt is a JSONL line's\n"
               "      input_ids before the first loss_mask 1 (the whole line without an answer). Stops at the\n"
               "      model's eos_token_id (generation_config.json, config.json) or N new tokens (default 128).\n"
               "      --json: one object with each prompt's output_ids (new tokens only) and tokens/s.\n"
               "  spec-decode DRAFTER_DIR --target MODEL --prompts FILE.jsonl [--max-new-tokens N] [--samples N]\n"
               "              [--temperature T] [--top-p P] [--seed S] [--device cpu|cuda[:I]] [--dtype bf16|fp32]\n"
               "              [--preset-seed N] [--trace FILE] [--json]\n"
               "      DFlash speculative decoding with an exported drafter, greedy or sampled (prompt i seeded as\n"
               "      generate seeds it: the same tokens as generate for the same S), one prompt at a time: the\n"
               "      drafter drafts a block from the target's captured layers, one target forward verifies it.\n"
               "      Prints each prompt's acceptance lengths, tau (their mean), whether the output equals plain\n"
               "      generate's with the same sampling and seed (lossless) and both tokens/s (speedup). Prompts as\n"
               "      for generate; the first N (default all); at most N new tokens each (default 128).\n"
               "      --trace FILE: a Kineto (Chrome) trace of a short extra run of both loops on the first prompt\n"
               "      (bench/gpu/trace_summary.py sums its kernels).\n"
               "  data-generate CONFIG --out FILE.jsonl [--prompts FILE.jsonl] [--samples N] [--device cpu|cuda[:I]]\n"
               "      `hsring data generate`: the config's target answers each prompt of --prompts (default the\n"
               "      config's [data] path; a prompt is a line's input_ids before the first loss_mask 1) with the\n"
               "      [generate] settings, and writes prompt + response per line, loss_mask 1 over the response.\n"
               "      Progress on stderr.\n"
               "exit codes: 0 ok, 1 an error (one line naming the file), 2 a bad command line.\n");
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
        if (!std::strcmp(argv[1], "generate")) return hsring::model::tools::generate(argc - 1, argv + 1);
        if (!std::strcmp(argv[1], "data-generate")) return hsring::model::tools::data_generate(argc - 1, argv + 1);
        if (!std::strcmp(argv[1], "spec-decode")) return hsring::model::tools::spec_decode(argc - 1, argv + 1);
        fmt::print(stderr, "hsring-model: unknown subcommand '{}'\n", argv[1]);
        usage();
        return 2;
    } catch (const hsring::model::tools::UsageError& e) {
        fmt::print(stderr, "hsring-model: {}\n", e.what());
        return 2;
    } catch (const hsring::Error& e) {
        fmt::print(stderr, "hsring-model: {}\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        fmt::print(stderr, "hsring-model: internal error: {}\n", e.what());
        return 1;
    }
}
