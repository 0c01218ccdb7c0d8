#pragma once
// Subcommands of hsring-model (reached as `hsring model SUBCOMMAND` through the hsring CLI).
#include "hsring/error.hpp"
#include "hsring/model_shape.hpp"
#include "model/drafter/dflash/config.hpp"
#include "model/decode/generate.hpp"
#include "model/decode/prompts.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

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

// spec-decode DRAFTER_DIR --target MODEL --prompts FILE.jsonl [--max-new-tokens N] [--samples N]
//             [--draft-tokens N] [--temperature T] [--top-p P] [--seed S] [--device D] [--preset-seed N] [--json]
// Speculative decoding with a drafter of any type (DFlash blocks, EAGLE-3 chains of --draft-tokens),
// greedy or sampled, batch 1 (model::spec_decode): acceptance lengths,
// tau, and the same prompts through plain generate with the same sampling and seeds (lossless
// check, speedup).
int spec_decode(int argc, char** argv);

// data-generate CONFIG --out FILE.jsonl [--prompts FILE] [--samples N] [--device D] (`hsring data generate`)
// The config's target answers each sample's prompt ([generate] settings); writes prompt + response
// with the loss mask over the response, in prepare-data's JSONL format.
int data_generate(int argc, char** argv);

// Throws hsring::Error naming DIR/config.json when the drafter does not read `target` (hidden size,
// vocabulary, layer count, captured layer ids).
void check_drafter_fits(const std::filesystem::path& dir, const DFlashConfig& c, const std::string& target,
                        const ModelShape& t);

} // namespace hsring::model::tools
