// hsring-bench drafter on the CPU (a smoke run of the benchmark itself): its --json result line
// carries the step's FLOP count (equal to dflash_step_flops for the blocks it trained), the
// TFLOP/s reached, the reference GEMM and the ratio, the phases and the device memory (0 here).
#include "hsring/model_shape.hpp"
#include "model/dflash_config.hpp"
#include "model/dflash_flops.hpp"
#include "model_test_util.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <memory>
#include <sstream>
#include <sys/wait.h>

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
    CHECK(total == doctest::Approx(double(f.at("layers")) + double(f.at("context_kv")) + double(f.at("attention")) +
                                   double(f.at("fc")) + double(f.at("lm_head"))));
    // Every group's keys pad to 256 here, so any anchors with the same grouping count the same;
    // all 3 non-anchor slots of the 6 blocks are scored.
    const DFlashConfig c = dflash_config_for(preset_shape("tiny"), 2, 4, -1, {});
    const DFlashStepFlops want = dflash_step_flops(c, 96, {1, 2, 3, 49, 50, 51}, {0, 0, 0, 48, 48, 48}, 18, BlockAttentionLayout{.group_blocks = 2});
    CHECK(total == doctest::Approx(want.total()));
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

} // TEST_SUITE
