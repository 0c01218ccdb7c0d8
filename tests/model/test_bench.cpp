// hsring-bench drafter on the CPU (a smoke run of the benchmark itself): its --json result line
// carries the step's FLOP count (equal to dflash_step_flops for the blocks it trained), the
// TFLOP/s reached, the reference GEMM and the ratio, the phases and the device memory (0 here);
// with --type eagle3 the EAGLE-3 step's, and the eager step's time and ratio from the same run.
#include "hsring/model_shape.hpp"
#include "model/drafter/dflash/config.hpp"
#include "model/drafter/dflash/flops.hpp"
#include "model_test_util.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

using namespace hsring;
using namespace hsring::model;

namespace {

// Runs `cmd`, returns {exit status, stdout}.
std::pair<int, std::string> capture(const std::string& cmd) {
    std::string out;
    std::FILE* p = ::popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::array<char, 4096> buf{};
    while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
    const int rc = ::pclose(p);
    return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

std::string last_line(const std::string& s) {
    std::istringstream in(s);
    std::string line, last;
    while (std::getline(in, line))
        if (!line.empty()) last = line;
    return last;
}

} // namespace

TEST_SUITE("bench") {

TEST_CASE("hsring-bench drafter --json reports the step's FLOPs, TFLOP/s and the ratio to a GEMM measured in the run") {
    const std::string exe = test::env_or("HSRING_BUILD_ROOT", ".") + "/bench/model/hsring-bench-drafter";
    // 2 sequences of 48 tokens, 3 anchors each (every token trained), block 4, groups of 2 blocks.
    auto [rc, out] = capture("'" + exe + "' --device cpu --preset tiny --layers 2 --seq-len 48 --samples 2 --anchors 3 "
                             "--block 4 --group 2 --iters 2 --warmup 1 --no-eager --phases --json 2>/dev/null");
    REQUIRE(rc == 0);
    const auto j = nlohmann::json::parse(last_line(out));
    CHECK(j.at("blocks") == 6);
    CHECK(j.at("compute_dtype") == "Float");
    CHECK(j.at("peak_allocated_bytes") == 0);  // no device memory on the CPU
    const auto& f = j.at("flops");
    const double total = f.at("total");
    // The total is the useful work; attention over padded and masked keys is reported apart.
    CHECK(total == doctest::Approx(double(f.at("layers")) + double(f.at("context_kv")) + double(f.at("attention")) +
                                   double(f.at("fc")) + double(f.at("lm_head"))));
    CHECK(double(f.at("computed")) == doctest::Approx(total + double(f.at("attention_padded"))));
    // Every group's keys pad to 256 here, so any anchors with the same grouping compute the same
    // (the useful part depends on the anchors); all 3 non-anchor slots of the 6 blocks are scored.
    const DFlashConfig c = dflash_config_for(preset_shape("tiny"), 2, 4, -1, {});
    const DFlashStepFlops want = dflash_step_flops(c, 96, {1, 2, 3, 49, 50, 51}, {0, 0, 0, 48, 48, 48}, 18, BlockAttentionLayout{.group_blocks = 2});
    CHECK(double(f.at("computed")) == doctest::Approx(want.computed()));
    CHECK(double(f.at("attention")) + double(f.at("attention_padded")) ==
          doctest::Approx(want.attention + want.attention_padded));
    CHECK(double(f.at("attention")) < 0.5 * double(f.at("attention_padded")));  // 48-token sequences, 256 keys
    CHECK(double(f.at("layers")) == doctest::Approx(want.layers));
    CHECK(double(f.at("lm_head")) == doctest::Approx(want.lm_head));
    const double step = j.at("step_s"), tflops = j.at("tflops_per_s"), ratio = j.at("gemm_ratio");
    CHECK(step > 0);
    CHECK(tflops == doctest::Approx(total / step / 1e12));
    const auto& g = j.at("gemm");
    CHECK(g.at("m") == 24);
    CHECK(g.at("k") == c.hidden_size);
    CHECK(g.at("n") == c.intermediate_size);
    CHECK(double(g.at("tflops_per_s")) > 0);
    CHECK(ratio == doctest::Approx(tflops / double(g.at("tflops_per_s"))));
    for (const char* k : {"sample_blocks", "forward_no_grad", "forward_chunked_ce", "backward", "adamw"})
        CHECK(j.at("phases_ms").contains(k));
}

TEST_CASE("hsring-bench drafter --matmul fp8: said in the result, another loss than bf16 on the same data; bad values fail") {
    const std::string exe = test::env_or("HSRING_BUILD_ROOT", ".") + "/bench/model/hsring-bench-drafter";
    const std::string args = " --device cpu --preset tiny --layers 2 --seq-len 48 --samples 2 --anchors 3 --block 4 "
                             "--iters 2 --warmup 1 --no-eager --json";
    auto [rc16, out16] = capture("'" + exe + "'" + args + " 2>/dev/null");
    auto [rc8, out8] = capture("'" + exe + "' --matmul fp8" + args + " 2>/dev/null");
    REQUIRE(rc16 == 0);
    REQUIRE(rc8 == 0);
    const auto j16 = nlohmann::json::parse(last_line(out16)), j8 = nlohmann::json::parse(last_line(out8));
    CHECK(j16.at("matmul") == "bf16");
    CHECK(j8.at("matmul") == "fp8");
    const double l16 = j16.at("loss"), l8 = j8.at("loss");
    CHECK(l8 != l16);
    CHECK(l8 == doctest::Approx(l16).epsilon(0.02));
    auto [rc, err] = capture("'" + exe + "' --matmul fp16" + args + " 2>&1");
    CHECK(rc == 1);
    CHECK(err.find("--matmul must be bf16 or fp8, got 'fp16'") != std::string::npos);
}

TEST_CASE("hsring-bench target --weights both: bf16 then FP8 on the same tokens, their ratio, each layer's error; a trace") {
    const std::string exe = test::env_or("HSRING_BUILD_ROOT", ".") + "/bench/model/hsring-bench-target";
    const std::string trace = std::filesystem::temp_directory_path() / ("hsring-bench-target-" + std::to_string(::getpid()) + ".json");
    const std::string args = " --device cpu --preset tiny --tokens 128 --seqs 3 --iters 1 --warmup 0 --no-eager";
    auto [rc, out] = capture("'" + exe + "'" + args + " --weights both --trace '" + trace + "' 2>&1");
    INFO(out);
    REQUIRE(rc == 0);
    CHECK(out.find("(bf16 weights): 128 tokens in 3 sequences") != std::string::npos);
    CHECK(out.find("(fp8 weights): 128 tokens in 3 sequences") != std::string::npos);
    CHECK(out.find("target: fp8 weights ") != std::string::npos);
    // every captured layer of the tiny preset's DFlash default (5 drafter layers) compared, finite
    std::size_t layers = 0;
    for (std::size_t at = out.find("hidden state, fp8 vs bf16: relative error"); at != std::string::npos;
         at = out.find("hidden state, fp8 vs bf16: relative error", at + 1))
        ++layers;
    CHECK(layers == 5);
    CHECK(out.find("finite false") == std::string::npos);
    CHECK(std::filesystem::file_size(trace) > 0);
    std::filesystem::remove(trace);
    auto [bad, err] = capture("'" + exe + "'" + args + " --weights int8 2>&1");
    CHECK(bad == 1);
    CHECK(err.find("--weights must be bf16, fp8 or both, got 'int8'") != std::string::npos);
}

TEST_CASE("hsring-bench drafter --compare-matmul trains bf16 and fp8 on the same learnable batches; both losses fall") {
    const std::string exe = test::env_or("HSRING_BUILD_ROOT", ".") + "/bench/model/hsring-bench-drafter";
    // A chain over 16 token ids: the tiny drafter (hidden 64, frozen random LM head) learns it in
    // 400 steps of 32 blocks; a few seconds on the CPU.
    auto [rc, out] = capture("'" + exe + "' --device cpu --preset tiny --layers 1 --seq-len 128 --samples 2 --anchors 16 "
                             "--block 4 --lr 1e-2 --compare-vocab 16 --compare-matmul 400 --json 2>/dev/null");
    REQUIRE(rc == 0);
    const auto j = nlohmann::json::parse(last_line(out));
    CHECK(j.at("mode") == "compare_matmul");
    CHECK(j.at("compute_dtype") == "Float");  // "bf16" is the compute dtype: fp32 on the CPU
    CHECK(j.at("steps") == 400);
    CHECK(j.at("vocab_used") == 16);
    const std::vector<double> base = j.at("losses").at("bf16"), fp8 = j.at("losses").at("fp8");
    REQUIRE(base.size() == 400);
    REQUIRE(fp8.size() == 400);
    CHECK(base != fp8);  // the FP8 run really differs
    const std::vector<double> tb = j.at("tenths").at("bf16"), t8 = j.at("tenths").at("fp8");
    REQUIRE(tb.size() == 10);
    REQUIRE(t8.size() == 10);
    double first = 0;
    for (std::size_t i = 0; i < 40; ++i) first += base[i] / 40;
    CHECK(tb[0] == doctest::Approx(first));
    double max_rel = 0;
    for (std::size_t i = 0; i < 10; ++i) max_rel = std::max(max_rel, std::abs(t8[i] - tb[i]) / tb[i]);
    CHECK(double(j.at("max_rel_diff")) == doctest::Approx(max_rel));
    MESSAGE("mean loss, first and last tenth: bf16 " << tb[0] << " -> " << tb[9] << ", fp8 " << t8[0] << " -> " << t8[9]
                                                     << "; max relative difference " << max_rel);
    // The batches are learnable: both curves fall far below where they start. They start
    // together and end together; in between, this tiny model learns the chain in sudden drops
    // whose timing differs between runs (fp8 ahead or behind by up to ~10-15% in a middle tenth,
    // either way over seeds), so only the ends are checked here; the GPU run measures the rest.
    CHECK(tb[9] < 0.7 * tb[0]);
    CHECK(t8[9] < 0.7 * t8[0]);
    CHECK(t8[0] == doctest::Approx(tb[0]).epsilon(0.02));
    CHECK(t8[9] == doctest::Approx(tb[9]).epsilon(0.1));
}

TEST_CASE("hsring-bench drafter --type eagle3 --json: a finite loss, the step's FLOPs and the ratio to PyTorch eager run beside it") {
    const std::string exe = test::env_or("HSRING_BUILD_ROOT", ".") + "/bench/model/hsring-bench-drafter";
    // 2 sequences of 24 tokens (46 rows), 3 TTT steps, a draft vocabulary of 256 of the tiny 512;
    // the eager step (bench/python/eagle3_eager.py, HSRING_PYTHON) runs first, on the CPU too.
    auto [rc, out] = capture("'" + exe + "' --type eagle3 --device cpu --preset tiny --seq-len 24 --samples 2 "
                             "--ttt-steps 3 --draft-vocab 256 --iters 2 --warmup 1 --json 2>&1");
    INFO(out);
    REQUIRE(rc == 0);
    CHECK(out.find("eager eagle3 tiny: 2 x 24 tokens, 3 TTT steps, draft vocab 256") != std::string::npos);
    CHECK(out.find(", ratio ") != std::string::npos);
    const auto j = nlohmann::json::parse(last_line(out));
    CHECK(j.at("type") == "eagle3");
    CHECK(j.at("rows") == 46);
    CHECK(j.at("ttt_steps") == 3);
    CHECK(j.at("draft_vocab") == 256);
    CHECK(j.at("layer_ids").get<std::vector<int>>() == eagle3_layer_ids(8));
    const double loss = j.at("loss"), step = j.at("step_s");
    CHECK(std::isfinite(loss));
    CHECK(loss > 0);
    CHECK(step > 0);
    // the step's useful matmul FLOPs at the tiny shape (hidden 64, 4 x 16 query heads, 2 kv heads,
    // intermediate 192): 46 rows, 2 x 23 * 24 / 2 causal pairs per step
    const double R = 46, H = 64, q = 64, kv = 32, I = 192, Vd = 256, pairs = 2 * 23.0 * 24 / 2;
    const auto& f = j.at("flops");
    CHECK(double(f.at("fc")) == doctest::Approx(2 * 2 * R * 3 * H * H));
    CHECK(double(f.at("layers")) == doctest::Approx(3 * 3 * 2 * R * (2 * H * (q + 2 * kv) + q * H + 3 * H * I)));
    CHECK(double(f.at("attention")) == doctest::Approx(3 * 4 * q * (3 * pairs + R * (0 + 1 + 2))));
    CHECK(double(f.at("lm_head")) == doctest::Approx(3 * 2 * 2 * R * H * Vd));
    CHECK(double(f.at("target")) == doctest::Approx(2 * R * H * Vd));
    CHECK(double(f.at("target_unscored")) == doctest::Approx(2 * 2 * H * Vd));  // the 2 sequences' first tokens
    const double total = f.at("total");
    CHECK(total == doctest::Approx(double(f.at("fc")) + double(f.at("layers")) + double(f.at("attention")) +
                                   double(f.at("lm_head")) + double(f.at("target"))));
    CHECK(double(j.at("tflops_per_s")) == doctest::Approx(total / step / 1e12));
    CHECK(j.at("gemm").at("m") == 46);
    CHECK(double(j.at("gemm_ratio")) == doctest::Approx(double(j.at("tflops_per_s")) / double(j.at("gemm").at("tflops_per_s"))));
    // the eager step ran in the same invocation: its time, loss and the ratio
    REQUIRE(j.contains("eager"));
    const auto& e = j.at("eager");
    CHECK(double(e.at("step_s")) > 0);
    CHECK(std::isfinite(double(e.at("loss"))));
    CHECK(double(e.at("ratio")) == doctest::Approx(double(e.at("step_s")) / step));
}

TEST_CASE("hsring-bench drafter --type: eagle3 refuses DFlash's options; an unknown type fails") {
    const std::string exe = test::env_or("HSRING_BUILD_ROOT", ".") + "/bench/model/hsring-bench-drafter";
    const std::string args = " --device cpu --preset tiny --seq-len 24 --no-eager";
    auto [rc, err] = capture("'" + exe + "' --type eagle3 --matmul fp8" + args + " 2>&1");
    CHECK(rc == 1);
    CHECK(err.find("--matmul, --lm-head and --recompute are DFlash's") != std::string::npos);
    auto [rc2, err2] = capture("'" + exe + "' --type medusa" + args + " 2>&1");
    CHECK(rc2 == 1);
    CHECK(err2.find("--type must be dflash or eagle3, got 'medusa'") != std::string::npos);
}

} // TEST_SUITE
