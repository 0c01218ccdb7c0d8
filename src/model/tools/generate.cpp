// hsring-model generate MODEL --prompts FILE.jsonl ...: runs the target's decode engine
// (model::generate) over pre-tokenized prompts and prints the new tokens.
//
// A prompt is a data-set line: `input_ids`, and where `loss_mask` marks an answer only the tokens
// before its first 1 (a chat sample's prompt; the answer is what is generated). A line without a
// loss_mask, or with all ones, is a prompt as a whole. Request i samples with
// seed mix64(S ^ mix64(i + golden)) (splitmix64): its tokens depend on S, its place in the file and
// its prompt, not on --batch.
#include "data/splitmix.hpp"
#include "hsring/dataset.hpp"
#include "hsring/error.hpp"
#include "hsring/model_shape.hpp"
#include "hsring/stop_tokens.hpp"
#include "model/drafter/dflash/drafter.hpp"
#include "model/decode/generate.hpp"
#include "model/tools/cli_args.hpp"
#include "model/tools/commands.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <algorithm>
#include <charconv>
#include <string>
#include <system_error>
#include <vector>

namespace hsring::model::tools {
namespace fs = std::filesystem;

namespace {

constexpr const char* kGenerateUsage =
    "usage: hsring-model generate MODEL --prompts FILE.jsonl [--max-new-tokens N] [--temperature T] [--top-p P] "
    "[--seed S] [--batch B] [--device cpu|cuda[:I]] [--preset-seed N] [--json]";

struct GenerateArgs {
    std::string model;
    fs::path prompts;
    std::int64_t max_new_tokens = 128;
    double temperature = 0.0;
    double top_p = 1.0;
    std::uint64_t seed = 0;
    std::int64_t batch = 16;
    std::string device = "cpu";
    std::uint64_t preset_seed = 1234;  // [run] seed's default: the same random preset as a default run
    bool json = false;
};

GenerateArgs parse_generate_args(int argc, char** argv) {
    GenerateArgs o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw UsageError(fmt::format("generate: {} needs a value; {}", a, kGenerateUsage));
            return argv[++i];
        };
        if (a == "--prompts") o.prompts = value();
        else if (a == "--max-new-tokens") o.max_new_tokens = number<std::int64_t>("generate", a, value());
        else if (a == "--temperature") o.temperature = number<double>("generate", a, value());
        else if (a == "--top-p") o.top_p = number<double>("generate", a, value());
        else if (a == "--seed") o.seed = number<std::uint64_t>("generate", a, value());
        else if (a == "--batch") o.batch = number<std::int64_t>("generate", a, value());
        else if (a == "--device") o.device = value();
        else if (a == "--preset-seed") o.preset_seed = number<std::uint64_t>("generate", a, value());
        else if (a == "--json") o.json = true;
        else if (!a.empty() && a[0] == '-') throw UsageError(fmt::format("generate: unknown option {}; {}", a, kGenerateUsage));
        else if (o.model.empty()) o.model = a;
        else throw UsageError(fmt::format("generate: unexpected argument '{}' (MODEL is already '{}'); {}", a, o.model,
                                          kGenerateUsage));
    }
    if (o.model.empty()) throw UsageError(fmt::format("generate: MODEL is missing; {}", kGenerateUsage));
    if (o.prompts.empty()) throw UsageError(fmt::format("generate: --prompts FILE.jsonl is missing; {}", kGenerateUsage));
    if (o.max_new_tokens < 0) throw UsageError("generate: --max-new-tokens must be >= 0");
    if (o.batch < 1) throw UsageError("generate: --batch must be at least 1");
    if (!(o.temperature >= 0)) throw UsageError("generate: --temperature must be >= 0 (0 = greedy)");
    if (!(o.top_p > 0 && o.top_p <= 1)) throw UsageError("generate: --top-p must lie in (0, 1]");
    return o;
}

} // namespace


int generate(int argc, char** argv) {
    const GenerateArgs o = parse_generate_args(argc, argv);
    const ModelShape shape = resolve_model_shape(o.model);
    const std::vector<GenerateRequest> requests = read_prompts(o.prompts, o.model, shape, o.seed);
    const at::Device device = parse_device("generate", o.device);
    const at::ScalarType dtype = default_compute_dtype(device);
    TargetModel model = TargetModel::load(shape, device, dtype, o.preset_seed);

    GenerateOptions opts;
    opts.max_new_tokens = o.max_new_tokens;
    opts.sampling = {o.temperature, o.top_p};
    opts.stop_tokens = model_stop_tokens(shape);
    opts.batch = o.batch;
    if (device.is_cuda()) {
        // Warm-up, not timed, as a serving engine would be and as bench/python/generate_hf.py
        // warms transformers: one full batch, so the caching allocator already holds the KV
        // cache's largest blocks and cuBLAS its plans for every shape.
        GenerateOptions w = opts;
        const std::size_t n = std::min<std::size_t>(requests.size(), static_cast<std::size_t>(opts.batch));
        model::generate(model, std::vector<GenerateRequest>(requests.begin(), requests.begin() + static_cast<std::ptrdiff_t>(n)), w);
    }
    const GenerateResult res = model::generate(model, requests, opts);
    const GenerateStats& st = res.stats;
    const double tps = st.seconds() > 0 ? static_cast<double>(st.new_tokens) / st.seconds() : 0.0;

    if (o.json) {
        nlohmann::json outs = nlohmann::json::array();
        for (std::size_t i = 0; i < res.outputs.size(); ++i)
            outs.push_back({{"index", i},
                            {"prompt_tokens", requests[i].prompt.size()},
                            {"output_ids", res.outputs[i].tokens},
                            {"finish", to_string(res.outputs[i].finish)}});
        nlohmann::json j = {
            {"model", o.model},
            {"prompts", o.prompts.string()},
            {"device", device.str()},
            {"dtype", c10::toString(dtype)},
            {"max_new_tokens", o.max_new_tokens},
            {"temperature", o.temperature},
            {"top_p", o.top_p},
            {"seed", o.seed},
            {"batch", o.batch},
            {"stop_tokens", opts.stop_tokens},
            {"outputs", outs},
            {"prompt_tokens", st.prompt_tokens},
            {"new_tokens", st.new_tokens},
            {"prefill_seconds", st.prefill_seconds},
            {"decode_seconds", st.decode_seconds},
            {"seconds", st.seconds()},
            {"tokens_per_s", tps},
        };
        fmt::print("{}\n", j.dump());
        return 0;
    }
    fmt::print("{} on {} ({}), {} prompts, batch {}, {}, stop tokens [{}]\n", o.model, device.str(),
               c10::toString(dtype), requests.size(), o.batch,
               o.temperature == 0 ? std::string("greedy")
                                  : fmt::format("temperature {} top-p {} seed {}", o.temperature, o.top_p, o.seed),
               fmt::join(opts.stop_tokens, ","));
    for (std::size_t i = 0; i < res.outputs.size(); ++i)
        fmt::print("{}: {} prompt tokens -> {} new ({}): {}\n", i, requests[i].prompt.size(),
                   res.outputs[i].tokens.size(), to_string(res.outputs[i].finish), fmt::join(res.outputs[i].tokens, " "));
    fmt::print("{} new tokens in {:.3f} s ({:.1f} tokens/s; prefill {:.3f} s for {} prompt tokens, {} decode steps)\n",
               st.new_tokens, st.seconds(), tps, st.prefill_seconds, st.prompt_tokens, st.decode_steps);
    return 0;
}

} // namespace hsring::model::tools
