// hsring plan CONFIG: predicted peak memory per GPU and host RAM against the machine, the knobs
// that make it fit, and with --measure the target/drafter rates and the GPU split (src/plan).
// Exit codes: 0 everything fits, 1 something does not (or a measurement failed), 2 usage,
// config or capacity errors (no GPU for --measure, capacity unknown).
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "hsring/error.hpp"
#include "hsring/units.hpp"
#include "hsring/config.hpp"
#include "plan/measure.hpp"
#include "plan/plan.hpp"
#include "plan/report.hpp"

#include <fmt/format.h>

#include <charconv>
#include <filesystem>
#include <optional>

namespace hsring::cli {
namespace {

struct PlanOptions {
    std::filesystem::path config;
    std::optional<std::uint64_t> gpu_mem, host_mem, gpus, sample_tokens;
    bool measure = false;
    double seconds = 20;
    std::string device = "cuda";
};

constexpr const char* kUsage =
    "usage: hsring plan CONFIG.toml [--gpu-mem SIZE] [--host-mem SIZE] [--gpus N] [--sample-tokens N] [--json]\n"
    "       hsring plan CONFIG.toml --measure [--seconds N] [--gpus N] [--device cuda|cpu] [--json]\n"
    "  predicted peak memory per GPU and for host RAM, by part, against the capacity (given, else\n"
    "  nvidia-smi and /proc/meminfo); what to change when something does not fit.\n"
    "  --sample-tokens N  plan for samples of N tokens instead of reading [data] path\n"
    "  --measure          run a few target batches and drafter steps at the config's shapes\n"
    "                     (hsring-bench) -> tokens/s, the split of --gpus GPUs between targets\n"
    "                     and drafters, measured vs predicted peak memory (the drafter of its\n"
    "                     [drafter] type, DFlash or EAGLE-3)\n"
    "  --seconds N        time each measurement this long (default 20)\n"
    "  --device cpu       measure on the CPU: checks the path end to end, numbers are not GPU numbers\n"
    "exit status: 0 everything fits, 1 something does not, 2 usage or config error\n";

std::uint64_t size_option(const ParsedArgs& a, const std::string& name) {
    const std::string v = *a.value(name);
    auto b = parse_bytes(v);
    if (!b || *b == 0) throw UsageError{fmt::format("{} '{}' is not a size: write e.g. 96GiB, 80GB or 1TiB", name, v)};
    return *b;
}

std::uint64_t count_option(const ParsedArgs& a, const std::string& name, std::uint64_t max) {
    const std::string v = *a.value(name);
    std::uint64_t n = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc{} || p != v.data() + v.size() || n == 0 || n > max)
        throw UsageError{fmt::format("{} '{}' must be a whole number from 1 to {}", name, v, max)};
    return n;
}

int run_plan(const PlanOptions& o, bool json) {
    Config cfg = load_config(o.config);
    const Derived d = derive(cfg);
    plan::SampleSource source = o.sample_tokens ? plan::SampleSource::synthetic(*o.sample_tokens)
                                                : plan::SampleSource::from_data(cfg, d);
    plan::Capacity cap = plan::query_capacity(o.gpu_mem, o.host_mem, o.gpus);
    const plan::Planner planner(std::move(cfg), std::move(source), cap);
    const plan::Plan p = planner.plan();
    const auto suggestions = planner.suggestions(p);
    std::optional<plan::Measurement> m;
    if (o.measure) m = plan::measure(planner, p, {o.seconds, o.device, o.sample_tokens, o.gpus});
    if (json) {
        nlohmann::json j = plan::plan_json(p, suggestions, cap);
        if (m) j["measure"] = plan::measurement_json(*m);
        fmt::print("{}\n", j.dump(2));
    } else {
        fmt::print("{}", plan::format_plan(p, suggestions, cap));
        if (m) fmt::print("{}", plan::format_measurement(*m));
    }
    if (m && !m->ok()) return 1;
    if (!p.gpu_capacity_known()) return 2;
    return p.fits() ? 0 : 1;
}

} // namespace

int plan(Args args) {
    PlanOptions o;
    bool json = false;
    try {
        ParsedArgs a = parse_args(args.subspan(1),
                                  {"--gpu-mem", "--host-mem", "--gpus", "--sample-tokens", "--seconds", "--device"},
                                  {"--json", "--measure", "--help"});
        if (a.flag("--help")) {
            fmt::print("{}", kUsage);
            return 0;
        }
        if (a.positional.size() != 1)
            throw UsageError{a.positional.empty() ? "a config file is required"
                                                  : "one config file, got " + std::to_string(a.positional.size())};
        o.config = a.positional[0];
        json = a.flag("--json");
        o.measure = a.flag("--measure");
        if (a.value("--gpu-mem")) o.gpu_mem = size_option(a, "--gpu-mem");
        if (a.value("--host-mem")) o.host_mem = size_option(a, "--host-mem");
        if (a.value("--gpus")) o.gpus = count_option(a, "--gpus", 4096);
        if (a.value("--sample-tokens")) o.sample_tokens = count_option(a, "--sample-tokens", 1u << 30);
        if (a.value("--seconds")) o.seconds = static_cast<double>(count_option(a, "--seconds", 3600));
        if (a.value("--device")) {
            o.device = *a.value("--device");
            if (o.device != "cuda" && o.device != "cpu") throw UsageError{"--device must be cuda or cpu, got '" + o.device + "'"};
        }
        if (!o.measure && (a.value("--seconds") || a.value("--device")))
            throw UsageError{"--seconds and --device go with --measure"};
    } catch (const UsageError& e) {
        fmt::print(stderr, "hsring plan: {}\n{}", e.message, kUsage);
        return 2;
    }
    return run_plan(o, json);
}

} // namespace hsring::cli
