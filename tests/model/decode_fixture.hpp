#pragma once
// What the decode tests share (test_generate, test_spec_decode, test_decode_graphs): token
// sequences, the packed forward's logits, running hsring-model and the transformers reference,
// a perturbed drafter and a sequence's captured layers.
#include "model/drafter/dflash/config.hpp"
#include "model/drafter/dflash/decode.hpp"
#include "model/drafter/dflash/drafter.hpp"
#include "model/drafter/dflash/export.hpp"
#include "model/drafter/dflash/loss.hpp"
#include "hsring/stop_tokens.hpp"
#include "model/decode/generate.hpp"
#include "model/decode/decode_graphs.hpp"
#include "model/target/kv_cache.hpp"
#include "model/decode/sampling.hpp"
#include "model/decode/spec_decode.hpp"
#include "model/io/safetensors.hpp"
#include "model/target/target.hpp"
#include "model/ops/tensor_init.hpp"
#include "model_test_util.hpp"
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

namespace hsring::test {

using namespace hsring::model;

inline std::vector<std::int64_t> iota_tokens(std::int64_t n, std::int64_t first, std::int64_t step = 7, std::int64_t vocab = 500) {
    std::vector<std::int64_t> v;
    for (std::int64_t i = 0; i < n; ++i) v.push_back((first + i * step) % vocab);
    return v;
}

inline at::Tensor tokens_of(const std::vector<std::int64_t>& v) { return at::tensor(v, at::kLong); }

// Runs tests/model/hf_reference.py ARGS with $HSRING_PYTHON; exits the test program with 77 when
// it cannot import transformers (the only skip).
inline void run_reference(const std::string& args) {
    std::string py = hsring::test::env_or("HSRING_PYTHON", "python3");
    if (py.find('/') != std::string::npos && ::access(py.c_str(), X_OK) != 0) py = "python3";
    const std::string src = hsring::test::env_or("HSRING_SOURCE_ROOT", ".");
    const std::string cmd = "'" + py + "' '" + src + "/tests/model/hf_reference.py' " + args;
    int rc = std::system(cmd.c_str());
    const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    if (code == 77) {
        std::fprintf(stderr, "skipped: transformers cannot be imported by %s\n", py.c_str());
        std::exit(77);
    }
    REQUIRE_MESSAGE(code == 0, "reference script failed: " << cmd);
}

// Runs hsring-model with `args`: stdout to `out`, stderr to `log`; returns the exit code.
inline int run_cli(const std::string& args, const std::filesystem::path& out, const std::filesystem::path& log) {
    const std::string exe = test::env_or("HSRING_BUILD_ROOT", ".") + "/src/model/hsring-model";
    int rc = std::system(("'" + exe + "' " + args + " >'" + out.string() + "' 2>'" + log.string() + "'").c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

inline std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p);
    return {std::istreambuf_iterator<char>(in), {}};
}

inline std::string q(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

// Logits [T, vocab] of one sequence from the packed (uncached) forward.
inline at::Tensor packed_logits(TargetModel& m, const std::vector<std::int64_t>& seq) {
    return m.forward(tokens_of(seq), {0, static_cast<std::int64_t>(seq.size())}, {}, {}, true);
}

inline std::vector<std::int64_t> slice(const std::vector<std::int64_t>& v, std::size_t a, std::size_t b) {
    return {v.begin() + static_cast<std::ptrdiff_t>(a), v.begin() + static_cast<std::ptrdiff_t>(b)};
}

inline std::vector<std::int64_t> cat(std::vector<std::int64_t> a, const std::vector<std::int64_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

constexpr double kRtol = 1e-4, kAtol = 1e-5;


// A drafter away from its fresh init (weights + N(0, 0.05^2)), so the context matters.
inline DFlashDrafter perturbed_drafter(const DFlashConfig& cfg, std::uint64_t seed) {
    DFlashDrafter d(cfg, 3, at::kCPU);
    at::NoGradGuard ng;
    at::Generator g = cpu_generator(seed);
    for (auto& p : d->parameters()) p.add_(at::randn(p.sizes(), g) * 0.05);
    return d;
}

// The target's layers `ids` over one sequence: [L, T, H], what a drafter's context holds.
inline at::Tensor captured_layers(TargetModel& m, const std::vector<std::int64_t>& seq, const std::vector<int>& ids) {
    std::vector<at::Tensor> layers(ids.size());
    m.forward(tokens_of(seq), {0, static_cast<std::int64_t>(seq.size())}, ids,
              [&](std::size_t i, const at::Tensor& h) { layers[i] = h; });
    return at::stack(layers);
}


} // namespace hsring::test
