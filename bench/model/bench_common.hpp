#pragma once
// Shared by the model benchmarks: options, GPU gate, timing, and the PyTorch eager subprocess
// (its last "RESULT {json}" line is the measurement).
#include "hsring/config.hpp"
#include "hsring/error.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hsring::bench {

// --key value / --flag options; unknown keys are an error naming the known ones.
class Options {
public:
    Options(int argc, char** argv, std::map<std::string, std::string> defaults) : values_(std::move(defaults)) {
        for (int i = 1; i < argc; ++i) {
            std::string a = argv[i];
            if (a == "-h" || a == "--help") {
                help_ = true;
                continue;
            }
            if (!a.starts_with("--") || !values_.count(a.substr(2))) {
                std::string known;
                for (const auto& [k, v] : values_) known += " --" + k;
                fail("unknown option '{}' (known:{})", a, known);
            }
            const std::string key = a.substr(2);
            given_.insert(key);
            if (values_[key] == "false" || values_[key] == "true") values_[key] = "true";
            else if (i + 1 < argc) values_[key] = argv[++i];
            else fail("option {} needs a value", a);
        }
    }
    bool help() const { return help_; }
    std::string str(const std::string& k) const { return values_.at(k); }
    std::int64_t num(const std::string& k) const {
        try {
            return std::stoll(values_.at(k));
        } catch (const std::exception&) {
            fail("--{} '{}' is not an integer", k, values_.at(k));
        }
    }
    double real(const std::string& k) const { return std::stod(values_.at(k)); }
    bool flag(const std::string& k) const { return values_.at(k) == "true"; }
    // A named workload's value for k, unless the command line gave k (e.g. --workload specforge).
    void preset(const std::string& k, const std::string& v) {
        if (!given_.count(k)) values_.at(k) = v;
    }
    void print_help(const char* prog, const char* what) const {
        fmt::print(stderr, "usage: {} [options]\n{}\noptions (default):\n", prog, what);
        for (const auto& [k, v] : values_) fmt::print(stderr, "  --{} ({})\n", k, v);
    }

private:
    std::map<std::string, std::string> values_;
    std::set<std::string> given_;
    bool help_ = false;
};

// 77 (meson's skip) with a reason when torch sees no CUDA device.
inline bool have_gpu(const char* prog) {
    if (torch::cuda::is_available()) return true;
    fmt::print("{}: needs a GPU: torch sees no CUDA device (or this build has no torch_cuda); nothing measured\n",
               prog);
    return false;
}

// "cuda" (the measurement) or "cpu" (a smoke run of the benchmark itself, e.g. --preset tiny).
inline at::Device bench_device(const std::string& name) {
    if (name != "cuda" && name != "cpu") fail("--device must be cuda or cpu, got '{}'", name);
    return name == "cuda" ? at::Device("cuda:0") : at::Device(at::kCPU);
}

// Seconds per call of fn over `iters` calls after `warmup` calls, device-synchronised.
template <typename F>
double seconds_per_iter(at::Device device, F&& fn, int warmup, int iters) {
    auto sync = [&] {
        if (device.is_cuda()) torch::cuda::synchronize();
    };
    for (int i = 0; i < warmup; ++i) fn();
    sync();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) fn();
    sync();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// Calls fn `warmup` times, then times it: `iters` calls, or with seconds > 0 as many calls as
// fit in that many seconds (at least 2). Returns {seconds per call, timed calls}.
template <typename F>
std::pair<double, int> timed_calls(at::Device device, F&& fn, int warmup, int iters, double seconds) {
    auto sync = [&] {
        if (device.is_cuda()) torch::cuda::synchronize();
    };
    for (int i = 0; i < warmup; ++i) fn();
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    int n = 0;
    if (seconds > 0) {
        while (n < 2 || elapsed() < seconds) {
            fn();
            sync();
            ++n;
        }
    } else {
        for (; n < iters; ++n) fn();
        sync();
    }
    return {elapsed() / n, n};
}

// The rate a plain GEMM [m x k] x [k x n] reaches on `device` in `dtype` (torch matmul), the limit a
// step's matmul work is compared with: `reps` timings of `batch` back-to-back matmuls after a
// warm-up, each synchronised; returns the median in TFLOP/s.
inline double gemm_tflops(at::Device device, at::ScalarType dtype, std::int64_t m, std::int64_t k, std::int64_t n,
                          int reps = 7, int batch = 10) {
    auto opts = at::TensorOptions().device(device).dtype(dtype);
    at::Tensor a = at::randn({m, k}, opts), b = at::randn({k, n}, opts), c = at::empty({m, n}, opts);
    auto sync = [&] {
        if (device.is_cuda()) torch::cuda::synchronize();
    };
    for (int i = 0; i < 3; ++i) at::matmul_out(c, a, b);
    sync();
    std::vector<double> rates;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < batch; ++i) at::matmul_out(c, a, b);
        sync();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / batch;
        rates.push_back(2.0 * double(m) * double(k) * double(n) / s / 1e12);
    }
    std::sort(rates.begin(), rates.end());
    return rates[rates.size() / 2];
}

// One JSON line on stdout: the machine-readable result (`hsring plan --measure` reads the last one).
inline void print_json_result(const nlohmann::json& j) { fmt::print("{}\n", j.dump()); }

inline at::ScalarType torch_dtype(DType t) {
    switch (t) {
    case DType::BF16: return at::kBFloat16;
    case DType::F16: return at::kHalf;
    case DType::F32: return at::kFloat;
    }
    return at::kFloat;
}

inline std::string default_python() {
    const char* p = std::getenv("HSRING_PYTHON");
    return p && *p ? p : "python3";
}

inline std::string default_script(const char* name) { return std::string(HSRING_SOURCE_ROOT) + "/bench/python/" + name; }

// Runs `python script args`, echoing its output to stderr; the JSON of its last RESULT line.
inline std::optional<nlohmann::json> run_eager(const std::string& python, const std::string& script,
                                               const std::string& args) {
    const std::string cmd = "'" + python + "' '" + script + "' " + args + " 2>&1";
    fmt::print(stderr, "eager: {}\n", cmd);
    std::FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return std::nullopt;
    std::optional<nlohmann::json> result;
    char line[4096];
    while (std::fgets(line, sizeof line, p)) {
        fmt::print(stderr, "  | {}", line);
        std::string s(line);
        if (s.starts_with("RESULT ")) {
            try {
                result = nlohmann::json::parse(s.substr(7));
            } catch (const nlohmann::json::exception&) {
            }
        }
    }
    const int rc = ::pclose(p);
    if (rc != 0) fmt::print(stderr, "eager: exited with status {}\n", rc);
    return result;
}

// The line that compares a step of `step` seconds over `samples` samples with the eager script's
// result (its step_s; absent or <= 0: not run or failed).
inline void print_eager_ratio(std::FILE* out, std::int64_t samples, double step, const std::optional<nlohmann::json>& eager) {
    const double eager_step = eager ? eager->value("step_s", -1.0) : -1.0;
    if (eager_step > 0)
        fmt::print(out, "drafter: {:.2f} samples/s, eager {:.2f} samples/s ({}), ratio {:.2f}\n", double(samples) / step,
                   double(samples) / eager_step, eager->value("note", ""), eager_step / step);
    else
        fmt::print(out, "drafter: {:.2f} samples/s, eager n/a (not run or failed), ratio n/a\n", double(samples) / step);
}

inline std::string join(const std::vector<std::int64_t>& v) {
    std::string s;
    for (auto x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
    return s;
}

} // namespace hsring::bench
