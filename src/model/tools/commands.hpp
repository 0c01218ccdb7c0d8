#pragma once
// Subcommands of hsring-model (reached as `hsring model SUBCOMMAND` through the hsring CLI).
#include "hsring/error.hpp"

namespace hsring::model::tools {

// A command line that cannot be run as written: hsring-model exits 2 (other errors: 1).
class UsageError : public Error {
public:
    using Error::Error;
};

// dump-hidden MODEL --layers 1,9,17|all --tokens TOKENS.json --out HS.safetensors
//             [--seed N] [--device cpu|cuda[:I]] [--dtype fp32|bf16] [--logits]
int dump_hidden(int argc, char** argv);

// check-drafter DRAFTER_DIR [--target MODEL --data FILE.jsonl [--samples N] [--num-anchors K]
//               [--seed S] [--gamma G] [--device D] [--dump OUT.safetensors]] [--json]
// With --target: loss, per-position accuracy and acceptance estimate of the drafter on the data
// (exit 0 if finite); without: load + one forward smoke check.
int check_drafter(int argc, char** argv);

// generate MODEL --prompts FILE.jsonl [--max-new-tokens N] [--temperature T] [--top-p P] [--seed S]
//          [--batch B] [--device D] [--preset-seed N] [--json]
// The decode engine (model::generate) over pre-tokenized prompts: new tokens per prompt, tokens/s.
int generate(int argc, char** argv);

} // namespace hsring::model::tools
