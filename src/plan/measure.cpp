// Measurements through the benchmark programs, and the GPU split (see measure.hpp).
#include "plan/measure.hpp"

#include "hsring/error.hpp"
#include "hsring/programs.hpp"
#include "hsring/units.hpp"
#include "plan/capacity.hpp"
#include "plan/child_process.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

namespace hsring::plan {
namespace {

std::string tail(const std::string& s, std::size_t n) {
    std::string t = s.size() > n ? "..." + s.substr(s.size() - n) : s;
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
    return t;
}

// The last line of `out` that parses as a JSON object.
std::optional<nlohmann::json> last_json_line(const std::string& out) {
    std::size_t end = out.size();
    while (end > 0) {
        std::size_t begin = out.rfind('\n', end - 1);
        begin = begin == std::string::npos ? 0 : begin + 1;
        const std::string line = out.substr(begin, end - begin);
        if (!line.empty() && line.front() == '{') {
            try {
                return nlohmann::json::parse(line);
            } catch (const nlohmann::json::exception&) {
            }
        }
        if (begin == 0) break;
        end = begin - 1;
    }
    return std::nullopt;
}

BenchRun run_bench(const std::string& mode, const Plan& plan, const MeasureOptions& o, int gpu) {
    BenchRun r;
    std::filesystem::path bench;
    try {
        bench = locate_program("hsring-bench");
    } catch (const Error& e) {
        r.error = e.what();
        return r;
    }
    std::vector<std::string> argv{bench.string(), mode, "--config", std::filesystem::absolute(plan.cfg.file).string(),
                                  "--json", "--seconds", fmt::format("{}", o.seconds), "--device", o.device};
    if (o.sample_tokens) {
        argv.push_back("--sample-tokens");
        argv.push_back(std::to_string(*o.sample_tokens));
    }
    std::vector<std::pair<std::string, std::string>> env;
    // Run on the GPU the config gives this worker, unless the caller chose devices already.
    if (o.device == "cuda" && !std::getenv("CUDA_VISIBLE_DEVICES")) env.emplace_back("CUDA_VISIBLE_DEVICES", std::to_string(gpu));
    for (const auto& a : argv) r.command += (r.command.empty() ? "" : " ") + a;
    if (!env.empty()) r.command = "CUDA_VISIBLE_DEVICES=" + env.front().second + " " + r.command;
    fmt::print(stderr, "measuring: {}\n", r.command);
    // Model loading and warm-up come on top of the timed seconds.
    const ChildResult c = run_child(argv, env, o.seconds * 3 + 900, /*echo_stderr=*/true);
    if (!c.started) {
        r.error = fmt::format("cannot start {}: {}", bench.string(), c.error);
        return r;
    }
    if (c.timed_out) {
        r.error = fmt::format("{} {} ran past {:.0f} s and was killed", bench.string(), mode, o.seconds * 3 + 900);
        return r;
    }
    if (c.exit_code != 0) {
        r.error = c.signal ? fmt::format("hsring-bench {} was killed by signal {}", mode, c.signal)
                           : fmt::format("hsring-bench {} exited with status {}", mode, c.exit_code);
        r.error += ": " + tail(c.errors + c.output, 600);
        return r;
    }
    auto j = last_json_line(c.output);
    if (!j) {
        r.error = fmt::format("hsring-bench {} printed no JSON result: {}", mode, tail(c.output, 300));
        return r;
    }
    r.result = *j;
    r.ok = true;
    return r;
}

} // namespace

std::vector<Split> gpu_splits(std::uint64_t gpus, double target_tps, double drafter_tps, double mean_sample_tokens,
                              double scaling) {
    std::vector<Split> out;
    for (std::uint64_t t = 1; t < gpus; ++t) {
        Split s;
        s.targets = t;
        s.drafters = gpus - t;
        s.target_tokens_per_s = static_cast<double>(t) * target_tps;
        double ranks = 0;  // 1 + scaling + scaling^2 + ...: each added rank a little less
        for (std::uint64_t k = 0; k < s.drafters; ++k) ranks += std::pow(scaling, static_cast<double>(k));
        s.drafter_tokens_per_s = ranks * drafter_tps;
        s.tokens_per_s = std::min(s.target_tokens_per_s, s.drafter_tokens_per_s);
        s.samples_per_s = mean_sample_tokens > 0 ? s.tokens_per_s / mean_sample_tokens : 0;
        out.push_back(s);
    }
    return out;
}

int measure_gpu(const std::vector<Place>& places, std::optional<std::uint64_t> physical) {
    if (places.empty() || places.front().is_cpu()) return 0;
    const int g = places.front().gpu;
    return physical && static_cast<std::uint64_t>(g) >= *physical ? 0 : g;
}

std::optional<Split> best_split(const std::vector<Split>& splits) {
    std::optional<Split> best;
    for (const auto& s : splits)
        if (!best || s.tokens_per_s > best->tokens_per_s * (1 + 1e-9)) best = s;
    return best;
}

Measurement measure(const Planner& planner, const Plan& plan, const MeasureOptions& o) {
    Measurement m;
    m.device = o.device;
    const Capacity& cap = planner.capacity();
    std::optional<std::uint64_t> physical;
    if (o.device == "cuda") {
        const NvidiaSmi smi = query_nvidia_smi();
        if (smi.memory_bytes.empty())
            fail("--measure needs an NVIDIA GPU, and this machine shows none: {}. Here, `hsring plan CONFIG "
                 "--gpu-mem SIZE` gives the arithmetic alone, and `--measure --device cpu` checks the measurement "
                 "path on the CPU", smi.error);
        m.gpus = o.gpus.value_or(smi.memory_bytes.size());
        m.gpus_source = o.gpus ? "--gpus" : "nvidia-smi";
        physical = smi.memory_bytes.size();
    } else {
        m.gpus = o.gpus.value_or(cap.gpu_count.value_or(2));
        m.gpus_source = o.gpus ? "--gpus" : cap.gpu_count ? cap.gpu_count_source : "assumed (CPU run)";
    }
    const Config& cfg = plan.cfg;
    const Derived& d = plan.derived;
    m.mean_sample_tokens = plan.workload.mean_sample_tokens;

    m.target = run_bench("target", plan, o, measure_gpu(cfg.topology.targets, physical));
    if (m.target.ok) {
        const auto& j = m.target.result;
        m.target_tokens_per_s = j.value("tokens_per_s", 0.0);
        m.target_batch_tokens = j.value("tokens", std::uint64_t(0));
        m.target_measured_bytes = j.value("peak_allocated_bytes", std::uint64_t(0));
        const Place place = o.device == "cpu" ? Place{} : Place{0};
        m.target_predicted_bytes = target_memory(cfg, d, "target", place, m.target_batch_tokens).allocated();
    }
    m.drafter = run_bench("drafter", plan, o, measure_gpu(cfg.topology.drafters, physical));
    if (m.drafter.ok) {
        const auto& j = m.drafter.result;
        m.drafter_tokens_per_s = j.value("tokens_per_s", 0.0);
        m.drafter_samples_per_s = j.value("samples_per_s", 0.0);
        m.drafter_measured_bytes = j.value("peak_allocated_bytes", std::uint64_t(0));
        // The prediction for exactly the slots the benchmark trained, with its step structure.
        const bool grads = j.value("grads_in_forward", false);
        const Place place = o.device == "cpu" ? Place{} : Place{0};
        MicroBatch worst;
        std::uint64_t worst_bytes = 0;
        for (const auto& s : j.value("slots", nlohmann::json::array())) {
            const auto slot = s.get<std::size_t>();
            if (slot >= plan.workload.slots.size()) continue;
            for (const auto& mb : plan.workload.micro_batches(slot)) {
                const auto b = drafter_batch_peak(cfg, d, place, mb, grads);
                if (b > worst_bytes) {
                    worst_bytes = b;
                    worst = mb;
                }
            }
        }
        m.drafter_predicted_bytes =
            drafter_memory(cfg, d, "drafter", place, worst, grads, 1).allocated();
    }
    if (m.ok()) {
        m.splits = gpu_splits(m.gpus, m.target_tokens_per_s, m.drafter_tokens_per_s, m.mean_sample_tokens);
        m.best = best_split(m.splits);
    }
    return m;
}

std::string format_measurement(const Measurement& m) {
    std::string s = fmt::format("\nmeasured with hsring-bench at the config's shapes, on {}\n",
                                m.device == "cuda" ? "the GPU" : "the CPU (a smoke run: not GPU numbers)");
    auto mem_line = [&](const char* who, std::uint64_t measured, std::uint64_t predicted) {
        if (measured == 0) return fmt::format("  {} peak memory: not measured on this device (predicted {})\n", who, gib(predicted));
        return fmt::format("  {} peak memory (torch allocated): measured {}, predicted {} ({:+.1f}%)\n", who, gib(measured),
                           gib(predicted),
                           100.0 * (static_cast<double>(predicted) - static_cast<double>(measured)) / static_cast<double>(measured));
    };
    if (m.target.ok) {
        s += fmt::format("  target: {:.0f} tokens/s ({} tokens per batch)\n", m.target_tokens_per_s, m.target_batch_tokens);
        s += mem_line("target", m.target_measured_bytes, m.target_predicted_bytes);
    } else {
        s += fmt::format("  target: FAILED: {}\n", m.target.error);
    }
    if (m.drafter.ok) {
        s += fmt::format("  drafter: {:.0f} trained tokens/s, {:.2f} samples/s\n", m.drafter_tokens_per_s, m.drafter_samples_per_s);
        s += mem_line("drafter", m.drafter_measured_bytes, m.drafter_predicted_bytes);
    } else {
        s += fmt::format("  drafter: FAILED: {}\n", m.drafter.error);
    }
    if (!m.ok()) return s;
    s += fmt::format("\nsplits of {} GPUs ({}): one target = {:.1f} drafters ({:.0f} / {:.0f} tokens/s); each added drafter "
                     "rank counted at {:.2f}x\n",
                     m.gpus, m.gpus_source, m.drafter_tokens_per_s > 0 ? m.target_tokens_per_s / m.drafter_tokens_per_s : 0.0,
                     m.target_tokens_per_s, m.drafter_tokens_per_s, kDrafterScaling);
    for (const auto& x : m.splits)
        s += fmt::format("  {} target(s) + {} drafter(s): targets {:.0f}, drafters {:.0f} -> {:.0f} trained tokens/s, "
                         "{:.2f} samples/s{}\n",
                         x.targets, x.drafters, x.target_tokens_per_s, x.drafter_tokens_per_s, x.tokens_per_s,
                         x.samples_per_s, m.best && m.best->targets == x.targets ? "   <- recommended" : "");
    if (m.splits.empty()) s += "  (a split needs at least 2 GPUs)\n";
    if (m.best) {
        std::string t, d;
        for (std::uint64_t i = 0; i < m.best->targets; ++i) t += (t.empty() ? "" : ", ") + std::to_string(i);
        for (std::uint64_t i = m.best->targets; i < m.gpus; ++i) d += (d.empty() ? "" : ", ") + std::to_string(i);
        s += fmt::format("recommended: [topology] targets = [{}], drafters = [{}]: {:.2f} trained samples/s expected{}\n", t,
                         d, m.best->samples_per_s,
                         m.best->drafters > 1 ? fmt::format(" (a gang of {} data-parallel drafter ranks; each added rank "
                                                                 "counted at {:g}x, not measured on GPUs yet)",
                                                                 m.best->drafters, kDrafterScaling)
                                              : std::string());
    }
    return s;
}

nlohmann::json measurement_json(const Measurement& m) {
    using nlohmann::json;
    auto bench = [](const BenchRun& b) {
        return json{{"command", b.command}, {"ok", b.ok}, {"error", b.error}, {"result", b.result}};
    };
    json splits = json::array();
    for (const auto& x : m.splits)
        splits.push_back({{"targets", x.targets}, {"drafters", x.drafters}, {"target_tokens_per_s", x.target_tokens_per_s},
                          {"drafter_tokens_per_s", x.drafter_tokens_per_s}, {"tokens_per_s", x.tokens_per_s},
                          {"samples_per_s", x.samples_per_s}});
    json best = nullptr;
    if (m.best)
        best = {{"targets", m.best->targets}, {"drafters", m.best->drafters}, {"tokens_per_s", m.best->tokens_per_s},
                {"samples_per_s", m.best->samples_per_s}};
    return {{"device", m.device},
            {"ok", m.ok()},
            {"target",
             {{"tokens_per_s", m.target_tokens_per_s},
              {"batch_tokens", m.target_batch_tokens},
              {"measured_peak_allocated_bytes", m.target_measured_bytes},
              {"predicted_allocated_bytes", m.target_predicted_bytes},
              {"bench", bench(m.target)}}},
            {"drafter",
             {{"tokens_per_s", m.drafter_tokens_per_s},
              {"samples_per_s", m.drafter_samples_per_s},
              {"measured_peak_allocated_bytes", m.drafter_measured_bytes},
              {"predicted_allocated_bytes", m.drafter_predicted_bytes},
              {"bench", bench(m.drafter)}}},
            {"mean_sample_tokens", m.mean_sample_tokens},
            {"gpus", m.gpus},
            {"gpus_source", m.gpus_source},
            {"drafter_scaling", kDrafterScaling},
            {"splits", splits},
            {"recommended", best}};
}

} // namespace hsring::plan
