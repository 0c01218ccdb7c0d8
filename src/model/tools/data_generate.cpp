// hsring-model data-generate CONFIG --out FILE.jsonl [--prompts FILE] (`hsring data generate`): the
// target of a run config answers every sample of its [data] path (or --prompts) with the decode
// engine (model::generate), and
// the answers become a data set in prepare-data's format: the prompt, then the target's own
// response, with the loss mask over the response. A drafter learns what its target says, not
// what the data set's author wrote (DFlash trains on target-generated responses).
//
// The prompt of a sample is its input_ids before the first loss_mask 1 (read_prompts); anything
// after the first answer is dropped (one turn). Sample i draws from ([generate] seed, i) and the
// preset weights are the run's ([run] seed), so the same config writes the same file again.
#include "hsring/config.hpp"
#include "hsring/error.hpp"
#include "hsring/model_shape.hpp"
#include "hsring/stop_tokens.hpp"
#include "model/drafter/dflash/drafter.hpp"
#include "model/decode/generate.hpp"
#include "model/tools/cli_args.hpp"
#include "model/tools/commands.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <csignal>
#include <cstring>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace hsring::model::tools {
namespace fs = std::filesystem;

namespace {

constexpr const char* kDataGenerateUsage =
    "usage: hsring data generate CONFIG --out FILE.jsonl [--prompts FILE.jsonl] [--samples N] [--device cpu|cuda[:I]]";

struct DataGenerateArgs {
    fs::path config, out, prompts;  // prompts: default the config's [data] path
    std::int64_t samples = -1;  // all
    std::string device;         // default: the config's first target place
};

DataGenerateArgs parse_data_generate_args(int argc, char** argv) {
    DataGenerateArgs o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw UsageError(fmt::format("data generate: {} needs a value; {}", a, kDataGenerateUsage));
            return argv[++i];
        };
        if (a == "--out") o.out = value();
        else if (a == "--prompts") o.prompts = value();
        else if (a == "--samples") o.samples = number<std::int64_t>("data generate", a, value());
        else if (a == "--device") o.device = value();
        else if (!a.empty() && a[0] == '-') throw UsageError(fmt::format("data generate: unknown option {}; {}", a, kDataGenerateUsage));
        else if (o.config.empty()) o.config = a;
        else throw UsageError(fmt::format("data generate: unexpected argument '{}'; {}", a, kDataGenerateUsage));
    }
    if (o.config.empty()) throw UsageError(fmt::format("data generate: CONFIG is missing; {}", kDataGenerateUsage));
    if (o.out.empty()) throw UsageError(fmt::format("data generate: --out FILE.jsonl is missing; {}", kDataGenerateUsage));
    if (o.samples == 0 || o.samples < -1) throw UsageError("data generate: --samples must be at least 1");
    return o;
}

std::string default_device(const Config& cfg) {
    const Place& p = cfg.topology.targets.front();
    return p.is_cpu() ? "cpu" : fmt::format("cuda:{}", p.gpu);
}

// The partial file an interrupted run must not leave behind: SIGINT / SIGTERM unlink it (an
// async-signal-safe call) and end the process as the signal would have.
char g_partial[4096];

void unlink_partial_and_die(int sig) {
    if (g_partial[0]) ::unlink(g_partial);
    ::signal(sig, SIG_DFL);
    ::raise(sig);
}

void remove_on_signal(const char* path) {
    if (!path) {
        ::signal(SIGINT, SIG_DFL);
        ::signal(SIGTERM, SIG_DFL);
        g_partial[0] = '\0';
        return;
    }
    std::snprintf(g_partial, sizeof g_partial, "%s", path);
    ::signal(SIGINT, unlink_partial_and_die);
    ::signal(SIGTERM, unlink_partial_and_die);
}

} // namespace

int data_generate(int argc, char** argv) {
    const DataGenerateArgs o = parse_data_generate_args(argc, argv);
    const Config cfg = load_config(o.config);
    const Derived derived = derive(cfg);
    const ModelShape& shape = derived.target;
    const fs::path data = o.prompts.empty() ? cfg.resolve(cfg.data.path) : o.prompts;
    std::error_code ec;
    if (fs::is_directory(o.out, ec))
        fail("data generate: --out {} is a directory: give the answers' file name (e.g. {})", o.out.string(),
             (o.out / "answers.jsonl").string());
    if (fs::exists(o.out, ec) && fs::equivalent(o.out, data, ec))
        fail("data generate: --out {} is the prompts' file {}: write elsewhere", o.out.string(), data.string());
    const std::uint64_t seed = cfg.generate.seed ? cfg.generate.seed : cfg.run.seed;
    std::vector<GenerateRequest> requests = read_prompts(data, shape.source, shape, seed);
    if (o.samples > 0 && static_cast<std::size_t>(o.samples) < requests.size())
        requests.resize(static_cast<std::size_t>(o.samples));

    GenerateOptions opts;
    opts.max_new_tokens = static_cast<std::int64_t>(cfg.generate.max_new_tokens);
    opts.sampling = {cfg.generate.temperature, cfg.generate.top_p};
    opts.stop_tokens = response_stop_tokens(cfg, shape);
    opts.batch = cfg.generate.batch;

    // Written beside the output and renamed at the end: an interrupted run (an error, Ctrl-C,
    // SIGTERM) leaves no half file. Opened before the model loads: an unwritable --out fails at once.
    const fs::path tmp = o.out.string() + fmt::format(".partial-{}", ::getpid());
    std::ofstream out(tmp);
    if (!out) fail("data generate: cannot write {}: {}", tmp.string(), std::strerror(errno));
    struct RemoveUnlessDone {
        const fs::path& p;
        bool done = false;
        ~RemoveUnlessDone() {
            std::error_code e;
            if (!done) fs::remove(p, e);
            remove_on_signal(nullptr);
        }
    } partial{tmp};
    remove_on_signal(tmp.c_str());
    const at::Device device = parse_device("data generate", o.device.empty() ? default_device(cfg) : o.device);
    const at::ScalarType dtype = default_compute_dtype(device);
    TargetModel model = TargetModel::load(shape, device, dtype, cfg.run.seed, cfg.target.weights == TargetWeights::FP8);
    fmt::print(stderr, "data generate: {} samples of {} answered by {} on {} ({}), {}, at most {} new tokens\n",
               requests.size(), data.string(), shape.source, device.str(), c10::toString(dtype),
               cfg.generate.temperature == 0
                   ? std::string("greedy")
                   : fmt::format("temperature {} top-p {} seed {}", cfg.generate.temperature, cfg.generate.top_p, seed),
               opts.max_new_tokens);

    const auto t0 = std::chrono::steady_clock::now();
    std::int64_t new_tokens = 0, stopped = 0;
    // Chunks of a few batches, so progress shows and lines are written as they are done; a
    // request's tokens do not depend on its chunk (generate.hpp: its own sampling stream).
    const std::size_t chunk = static_cast<std::size_t>(opts.batch) * 4;
    for (std::size_t first = 0; first < requests.size(); first += chunk) {
        const std::size_t last = std::min(requests.size(), first + chunk);
        const std::vector<GenerateRequest> part(requests.begin() + static_cast<std::ptrdiff_t>(first),
                                                requests.begin() + static_cast<std::ptrdiff_t>(last));
        const GenerateResult res = model::generate(model, part, opts);
        for (std::size_t i = 0; i < part.size(); ++i) {
            const auto& prompt = part[i].prompt;
            const auto& resp = res.outputs[i].tokens;
            std::vector<std::int64_t> ids(prompt);
            ids.insert(ids.end(), resp.begin(), resp.end());
            std::vector<int> mask(prompt.size(), 0);
            mask.resize(ids.size(), 1);
            out << nlohmann::json{{"input_ids", ids}, {"loss_mask", mask}}.dump() << '\n';
            new_tokens += static_cast<std::int64_t>(resp.size());
            stopped += res.outputs[i].finish == FinishReason::Stop;
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        fmt::print(stderr, "data generate: {} of {} samples, {} new tokens, {:.0f} tokens/s, {:.0f} s\n", last,
                   requests.size(), new_tokens, s > 0 ? double(new_tokens) / s : 0.0, s);
    }
    out.close();
    if (!out) fail("data generate: writing {} failed: {}", tmp.string(), std::strerror(errno));
    fs::rename(tmp, o.out);
    partial.done = true;
    fmt::print("{}: {} samples, {} response tokens ({} ended by a stop token, {} at max_new_tokens)\n",
               o.out.string(), requests.size(), new_tokens, stopped,
               static_cast<std::int64_t>(requests.size()) - stopped);
    return 0;
}

} // namespace hsring::model::tools
