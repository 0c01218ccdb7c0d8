#pragma once
// Subcommands of hsring-model (reached as `hsring model SUBCOMMAND` through the hsring CLI).
namespace hsring::model::tools {

// dump-hidden MODEL --layers 1,9,17|all --tokens TOKENS.json --out HS.safetensors
//             [--seed N] [--device cpu|cuda[:I]] [--dtype fp32|bf16] [--logits]
int dump_hidden(int argc, char** argv);

// check-drafter DIR: load an exported drafter, run one forward, exit 0 if it works.
int check_drafter(int argc, char** argv);

} // namespace hsring::model::tools
