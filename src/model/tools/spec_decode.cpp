// hsring-model spec-decode DRAFTER_DIR --target MODEL --prompts FILE.jsonl ...: speculative
// decoding with a drafter of any type (DFlash, EAGLE-3: drafter/registry reads its config.json) of
// pre-tokenized prompts, greedy or sampled, one prompt at a time (model::spec_decode),
// against plain generation of the same prompts with the same sampling and seeds (model::generate,
// batch 1): acceptance lengths, tau, whether the output is the target's own (lossless: equal
// tokens, greedy or sampled) and the speedup in tokens/s. --batch N decodes N prompts as the rows
// of each step both ways (speculative: one drafter call and one verify forward for the N rows;
// plain: N requests in flight).
//
// Prompt i's seed is mix64(S ^ mix64(i + golden)) for --seed S, as `hsring-model generate` seeds it.
//
// DRAFTER_DIR `random:L` is a fresh random DFlash drafter of L layers (block 16) for the target (mask:
// its known mask token, else its last row):
// tau ~1, for timing a verify step against a plain one (the decode engine's bench).
// --draft-tokens N: drafts per step of an EAGLE-3 chain (default 5); a DFlash drafter drafts its
// whole block, so N is refused unless it is block - 1.
// On a GPU it also reports the memory-bound limit of a plain step: the weights a step reads
// (TargetModel::decode_bytes) over the device's copy bandwidth measured in the same run.
//
// Prompts are read as `generate` reads them (the part of a line before its first loss_mask 1).
// Both loops run once on the first prompt for a few tokens before they are timed (warm-up).
#include "hsring/error.hpp"
#include "hsring/model_shape.hpp"
#include "hsring/stop_tokens.hpp"
#include "model/drafter/dflash/config.hpp"
#include "model/drafter/dflash/drafter.hpp"
#include "model/drafter/dflash/trainable.hpp"
#include "model/drafter/registry/registry.hpp"
#include "model/decode/generate.hpp"
#include "model/ops/kineto_trace.hpp"
#include "model/decode/spec_decode.hpp"
#include "model/tools/cli_args.hpp"
#include "model/tools/commands.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <chrono>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace hsring::model::tools {
namespace fs = std::filesystem;

namespace {

constexpr const char* kSpecDecodeUsage =
    "usage: hsring-model spec-decode DRAFTER_DIR|random:LAYERS --target MODEL --prompts FILE.jsonl [--max-new-tokens N] "
    "[--draft-tokens N] [--batch N] [--temperature T] [--top-p P] [--seed S] [--samples N] [--device cpu|cuda[:I]] [--dtype bf16|fp32] [--target-weights bf16|fp8] [--preset-seed N] [--trace FILE] [--eager] [--json]";

// A bound on new tokens per prompt: the caches are sized by prompt + max_new_tokens (a huge value
// overflowed into a capacity of 1).
constexpr std::int64_t kMaxNewTokens = std::int64_t{1} << 20;

struct SpecDecodeArgs {
    fs::path dir;
    std::string target;
    fs::path prompts;
    std::int64_t max_new_tokens = 128;
    std::int64_t draft_tokens = 0;     // 0 = the drafter type's default
    std::int64_t batch = 1;            // prompts decoded as the rows of one step, both ways
    double temperature = 0.0;
    double top_p = 1.0;
    std::uint64_t seed = 0;
    std::uint64_t samples = 0;         // 0 = all
    std::string device = "cpu";
    std::string dtype;                 // "" = bf16 on CUDA, fp32 on the CPU
    std::string target_weights = "bf16";  // fp8: the target's linear layers in FP8 ([target] weights)
    std::string trace;                 // a Kineto trace of a short extra run (both loops)
    std::optional<std::uint64_t> preset_seed;  // unset: the seed of the run that trained the drafter
    bool json = false;
    bool eager = false;                // decode and verify steps op by op, not through the decode engine's graphs
};

SpecDecodeArgs parse_spec_decode_args(int argc, char** argv) {
    SpecDecodeArgs o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw UsageError(fmt::format("spec-decode: {} needs a value; {}", a, kSpecDecodeUsage));
            return argv[++i];
        };
        if (a == "--target") o.target = value();
        else if (a == "--prompts") o.prompts = value();
        else if (a == "--max-new-tokens") o.max_new_tokens = number<std::int64_t>("spec-decode", a, value());
        else if (a == "--draft-tokens") {
            o.draft_tokens = number<std::int64_t>("spec-decode", a, value());
            if (o.draft_tokens < 1) throw UsageError("spec-decode: --draft-tokens must be at least 1");
        }
        else if (a == "--batch") {
            o.batch = number<std::int64_t>("spec-decode", a, value());
            if (o.batch < 1 || o.batch > 1024) throw UsageError("spec-decode: --batch must be in 1..1024");
        }
        else if (a == "--temperature") o.temperature = number<double>("spec-decode", a, value());
        else if (a == "--top-p") o.top_p = number<double>("spec-decode", a, value());
        else if (a == "--seed") o.seed = number<std::uint64_t>("spec-decode", a, value());
        else if (a == "--samples") o.samples = number<std::uint64_t>("spec-decode", a, value());
        else if (a == "--device") o.device = value();
        else if (a == "--dtype") o.dtype = value();
        else if (a == "--target-weights") o.target_weights = value();
        else if (a == "--trace") o.trace = value();
        else if (a == "--preset-seed") o.preset_seed = number<std::uint64_t>("spec-decode", a, value());
        else if (a == "--json") o.json = true;
        else if (a == "--eager") o.eager = true;
        else if (!a.empty() && a[0] == '-') throw UsageError(fmt::format("spec-decode: unknown option {}; {}", a, kSpecDecodeUsage));
        else if (o.dir.empty()) o.dir = a;
        else throw UsageError(fmt::format("spec-decode: unexpected argument '{}' (DRAFTER_DIR is already '{}'); {}", a,
                                          o.dir.string(), kSpecDecodeUsage));
    }
    if (o.dir.empty()) throw UsageError(fmt::format("spec-decode: DRAFTER_DIR is missing; {}", kSpecDecodeUsage));
    if (o.target.empty())
        throw UsageError(fmt::format("spec-decode: --target MODEL is missing (the target the drafter was trained "
                                     "for); {}", kSpecDecodeUsage));
    if (o.prompts.empty()) throw UsageError(fmt::format("spec-decode: --prompts FILE.jsonl is missing; {}", kSpecDecodeUsage));
    if (o.max_new_tokens < 1 || o.max_new_tokens > kMaxNewTokens)
        throw UsageError(fmt::format("spec-decode: --max-new-tokens must be in 1..{} (the KV caches hold prompt + "
                                     "new tokens)", kMaxNewTokens));
    if (!(o.temperature >= 0)) throw UsageError("spec-decode: --temperature must be >= 0 (0 = greedy)");
    if (!(o.top_p > 0 && o.top_p <= 1)) throw UsageError("spec-decode: --top-p must be in (0, 1]");
    if (o.target_weights != "bf16" && o.target_weights != "fp8")
        throw UsageError(fmt::format("spec-decode: --target-weights must be bf16 or fp8, got '{}'", o.target_weights));
    if (!o.dtype.empty() && o.dtype != "bf16" && o.dtype != "fp32")
        throw UsageError(fmt::format("spec-decode: --dtype must be bf16 or fp32, got '{}'", o.dtype));
    return o;
}

// A fresh DFlash drafter of `layers` layers (block 16) at the target's dims, for timing only.
std::unique_ptr<TrainableDrafter> random_drafter(const ModelShape& shape, int layers, at::Device device) {
    if (layers < 1) fail("spec-decode: random:LAYERS needs at least 1 layer, got {}", layers);
    // Timing only: a target with no known mask token gets its last row (the drafts are random anyway).
    const DFlashConfig cfg = dflash_config_for(shape, layers, 16, shape.mask_token_id.value_or(shape.vocab_size - 1), {});
    return std::make_unique<DFlashTrainable>(DFlashDrafter(cfg, 1, device), cfg);
}

// Bytes per second of a device-to-device copy of 2 GiB (read + write), the best of 5: what a
// step that reads its weights once can approach.
double copy_bandwidth(at::Device device) {
    const at::Tensor src = at::empty({std::int64_t{1} << 31}, at::TensorOptions().dtype(at::kByte).device(device));
    at::Tensor dst = at::empty_like(src);
    dst.copy_(src);
    torch::cuda::synchronize();
    double best = 0;
    for (int i = 0; i < 5; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        dst.copy_(src);
        torch::cuda::synchronize();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, 2.0 * static_cast<double>(src.nbytes()) / s);
    }
    return best;
}

// The first token where two outputs differ (their common length when one is a prefix of the other).
std::size_t first_difference(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
    std::size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    return i;
}

// A preset target's random weights come from a seed: a drafter trained by `hsring run` learned the
// ones of that run's [run] seed, which its run dir's run.json records (the export's default place
// is RUN_DIR/drafter). Without --preset-seed that seed is used, and said; no run.json: 1234 (the
// [run] seed default), with a warning.
std::uint64_t preset_seed(const SpecDecodeArgs& o, const ModelShape& shape) {
    if (o.preset_seed) return *o.preset_seed;
    constexpr std::uint64_t kDefault = 1234;
    if (shape.source.rfind("preset:", 0) != 0) return kDefault;  // unused: real weights
    const fs::path record = o.dir.parent_path() / "run.json";
    std::ifstream in(record);
    const nlohmann::json j = in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
    if (j.is_object() && j.contains("seed") && j["seed"].is_number_unsigned()) {
        const auto seed = j["seed"].get<std::uint64_t>();
        std::fprintf(stderr, "spec-decode: %s: random weights from seed %llu, the [run] seed of the run that trained "
                     "this drafter (%s); --preset-seed N for others\n", shape.source.c_str(),
                     static_cast<unsigned long long>(seed), record.string().c_str());
        return seed;
    }
    if (o.dir.string().rfind("random:", 0) != 0)
        std::fprintf(stderr, "spec-decode: warning: %s: random weights from seed %llu ([run] seed's default); no "
                     "run.json beside %s says which seed trained this drafter: pass --preset-seed N (the run's "
                     "[run] seed), or the drafter drafts for other weights than it learned\n", shape.source.c_str(),
                     static_cast<unsigned long long>(kDefault), o.dir.string().c_str());
    return kDefault;
}

} // namespace

int spec_decode(int argc, char** argv) {
    const SpecDecodeArgs o = parse_spec_decode_args(argc, argv);
    const ModelShape shape = resolve_model_shape(o.target);
    const at::Device device = parse_device("spec-decode", o.device);
    const std::string dir = o.dir.string();
    const std::unique_ptr<TrainableDrafter> drafter =
        dir.rfind("random:", 0) == 0 ? random_drafter(shape, number<int>("spec-decode", "random:LAYERS", dir.substr(7)), device)
                                     : load_drafter(o.dir, device);
    if (const std::string why = drafter->misfit(shape); !why.empty())
        fail("{}: {}: pass the --target the drafter was trained for", (o.dir / "config.json").string(), why);
    if (!o.trace.empty() && !std::ofstream(o.trace, std::ios::app))
        fail("spec-decode: cannot write the trace {}: {}", o.trace, std::strerror(errno));
    std::vector<GenerateRequest> requests = read_prompts(o.prompts, o.target, shape, o.seed);
    if (o.samples > 0 && o.samples < requests.size()) requests.resize(o.samples);
    if (requests.empty()) fail("{}: no prompts", o.prompts.string());

    // fp32 on a GPU: greedy near-ties (flat logits of random weights) stop flipping between a
    // block verify and a one-token step, so `lossless` tests the algorithm, not bf16 noise.
    const at::ScalarType dtype = o.dtype.empty() ? default_compute_dtype(device)
                                 : o.dtype == "fp32"  ? at::kFloat
                                                      : at::kBFloat16;
    TargetModel target =
        TargetModel::load(shape, device, dtype, preset_seed(o, shape), o.target_weights == "fp8");
    drafter->module().eval();
    SpecDecodeOptions sopts;
    sopts.max_new_tokens = o.max_new_tokens;
    sopts.draft_tokens = o.draft_tokens;
    sopts.sampling = {o.temperature, o.top_p};
    sopts.stop_tokens = model_stop_tokens(shape);
    GenerateOptions gopts;
    gopts.max_new_tokens = o.max_new_tokens;
    gopts.sampling = sopts.sampling;
    gopts.stop_tokens = sopts.stop_tokens;
    sopts.batch = gopts.batch = o.batch;  // the same rows per step both ways
    sopts.decode_graphs = gopts.decode_graphs = !o.eager;

    std::int64_t block = 0;  // a verify step's tokens: 1 + the drafts per step
    {  // Warm-up (allocator, kernels), not timed: two verify steps of a block of 16, one batch.
        SpecDecodeOptions w = sopts;
        w.max_new_tokens = std::min<std::int64_t>(o.max_new_tokens, 32);
        const std::vector<GenerateRequest> first(
            requests.begin(), requests.begin() + std::min<std::ptrdiff_t>(o.batch, std::ssize(requests)));
        block = model::spec_decode(target, *drafter, first, w).block;
        GenerateOptions gw = gopts;
        gw.max_new_tokens = w.max_new_tokens;
        model::generate(target, first, gw);
    }
    if (!o.trace.empty()) {  // after the warm-up, before the timed runs: 2 blocks of each loop
        SpecDecodeOptions ts = sopts;
        ts.max_new_tokens = std::min<std::int64_t>(o.max_new_tokens, 2 * block);
        GenerateOptions tg = gopts;
        tg.max_new_tokens = std::min<std::int64_t>(o.max_new_tokens, 8);
        write_kineto_trace(o.trace, device.is_cuda(), 1, [&] {
            model::spec_decode(target, *drafter, {requests[0]}, ts);
            model::generate(target, {requests[0]}, tg);
        });
    }
    const GenerateResult plain = model::generate(target, requests, gopts);
    const SpecDecodeResult spec = model::spec_decode(target, *drafter, requests, sopts);
    const SpecDecodeStats& st = spec.stats;

    bool lossless = true;
    std::vector<bool> same(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
        same[i] = spec.outputs[i].tokens == plain.outputs[i].tokens;
        lossless = lossless && same[i];
    }
    const double spec_tps = st.seconds() > 0 ? double(st.new_tokens) / st.seconds() : 0.0;
    const double plain_tps =
        plain.stats.seconds() > 0 ? double(plain.stats.new_tokens) / plain.stats.seconds() : 0.0;
    const double speedup = plain_tps > 0 ? spec_tps / plain_tps : 0.0;

    if (o.json) {
        nlohmann::json prompts = nlohmann::json::array();
        for (std::size_t i = 0; i < requests.size(); ++i)
            prompts.push_back({{"index", i},
                               {"prompt_tokens", requests[i].prompt.size()},
                               {"acceptance_lengths", spec.outputs[i].acceptance_lengths},
                               {"output_ids", spec.outputs[i].tokens},
                               {"finish", to_string(spec.outputs[i].finish)},
                               {"lossless", same[i]},
                               // new token where plain generate's output first differs (null: equal)
                               {"differs_at", same[i] ? nlohmann::json()
                                                      : nlohmann::json(first_difference(spec.outputs[i].tokens,
                                                                                        plain.outputs[i].tokens))}});
        nlohmann::json j = {
            {"drafter", o.dir.string()},
            {"target", o.target},
            {"data", o.prompts.string()},
            {"device", device.str()},
            {"dtype", c10::toString(dtype)},
            {"drafter_type", drafter->type()},
            {"block_size", spec.block},          // a verify step's tokens (acceptance lengths are 1..block_size)
            {"draft_tokens", spec.block - 1},    // drafts per step
            {"max_new_tokens", o.max_new_tokens},
            {"temperature", o.temperature},
            {"top_p", o.top_p},
            {"seed", o.seed},
            {"stop_tokens", sopts.stop_tokens},
            {"samples", requests.size()},
            {"batch", o.batch},
            {"tau", st.tau()},
            {"verify_steps", st.verify_steps},
            {"new_tokens", st.new_tokens},
            {"prompts", prompts},
            {"lossless", lossless},
            {"spec_seconds", st.seconds()},
            {"draft_seconds", st.draft_seconds},
            {"verify_seconds", st.verify_seconds},
            {"prefill_seconds", st.prefill_seconds},
            {"target_seconds", plain.stats.seconds()},
            {"spec_tokens_per_s", spec_tps},
            {"target_tokens_per_s", plain_tps},
            {"speedup", speedup},
            {"decode_graphs", !o.eager},
            {"draft_graphs", spec.draft_graphs},
            {"plain_ms_per_token", plain_tps > 0 ? 1000.0 / plain_tps : 0.0},
            {"verify_ms_per_step", st.verify_steps > 0 ? 1000.0 * st.verify_seconds / double(st.verify_steps) : 0.0},
            {"draft_ms_per_step", st.verify_steps > 0 ? 1000.0 * st.draft_seconds / double(st.verify_steps) : 0.0},
            {"weight_bytes", target.decode_bytes()},
        };
        if (device.is_cuda()) {
            const double bw = copy_bandwidth(device);
            j["copy_bytes_per_s"] = bw;
            j["memory_bound_ms_per_token"] = 1000.0 * double(target.decode_bytes()) / bw;
        }
        fmt::print("{}\n", j.dump());
        return 0;
    }
    const std::string how = o.temperature > 0 ? fmt::format("temperature {} top-p {} seed {}", o.temperature, o.top_p,
                                                            o.seed)
                                              : std::string("greedy");
    fmt::print("{}: {}; {} drafts per step, on {} ({} {}), {} prompts, {}, batch {}, stop tokens [{}]\n",
               o.dir.string(), drafter->describe(), spec.block - 1, o.target, device.str(), c10::toString(dtype),
               requests.size(), how, o.batch, fmt::join(sopts.stop_tokens, ","));
    for (std::size_t i = 0; i < requests.size(); ++i) {
        const auto& out = spec.outputs[i];
        fmt::print("{}: {} prompt tokens -> {} new ({}) in {} verify steps, acceptance lengths {}\n", i,
                   requests[i].prompt.size(), out.tokens.size(), to_string(out.finish), out.acceptance_lengths.size(),
                   fmt::join(out.acceptance_lengths, " "));
        if (!same[i])
            fmt::print("   NOT the target's own output (plain generate, same sampling and seed): differs at new token {}\n",
                       first_difference(out.tokens, plain.outputs[i].tokens));
    }
    fmt::print("tau {:.3f} ({} new tokens, {} verify steps); lossless: {}\n", st.tau(), st.new_tokens,
               st.verify_steps, lossless ? "yes (equal to plain generate, same sampling and seed)" : "NO");
    fmt::print("speculative {:.1f} tokens/s ({:.3f} s: prefill {:.3f}, draft {:.3f}, verify {:.3f}); target alone "
               "{:.1f} tokens/s ({:.3f} s); speedup {:.2f}x\n",
               spec_tps, st.seconds(), st.prefill_seconds, st.draft_seconds, st.verify_seconds, plain_tps,
               plain.stats.seconds(), speedup);
    return 0;
}

} // namespace hsring::model::tools
