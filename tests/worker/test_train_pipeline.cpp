// The real workers (LibTorch, CPU) around a ring and ledger, the test in the supervisor's place:
// a tiny Qwen3 target and a 1-layer DFlash drafter; the loss falls, every sample is trained
// exactly once, a SIGKILLed drafter resumes from its checkpoint, and the export loads back; a CPU
// drafter with [train] matmul = "fp8" trains too (FP8 emulated by _scaled_mm on the CPU).
#include "hsring/train_log.hpp"
#include "pipeline_fixture.hpp"
#include "worker/core/checkpoint_store.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <sys/wait.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

using namespace hsring;

namespace {

std::vector<double> losses(const std::filesystem::path& metrics) {
    std::vector<double> out;
    std::ifstream in(metrics);
    std::string line;
    while (std::getline(in, line)) {
        auto p = line.find("\"loss\":");
        if (p != std::string::npos) out.push_back(std::stod(line.substr(p + 7)));
    }
    return out;
}

} // namespace

TEST_CASE("real workers on CPU: loss falls, every sample once, drafter killed and resumed") {
    test::SynthRun run(160, 2, "lr = 3e-3\nnum_anchors = 16\nwarmup_steps = 2\n", "train", "block_size = 4\n");
    std::vector<test::WorkerProc> targets{run.start("target", 0), run.start("target", 1)};
    test::WorkerProc drafter = run.start("drafter", 0);
    // Kill the drafter once it has checkpointed, then let a new incarnation finish.
    const auto ckpts = run.run_dir() / "checkpoints";
    for (int i = 0; i < 600 && worker::CheckpointStore::read_latest(ckpts) < 8; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(worker::CheckpointStore::read_latest(ckpts) >= 8);
    run.kill(drafter);
    drafter = run.start("drafter", 0);
    int st = run.wait(drafter, 300);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
    for (auto& t : targets) {
        int ts = run.wait(t, 30);
        CHECK(WIFEXITED(ts));
    }
    const std::uint64_t step = worker::CheckpointStore::read_latest(ckpts);
    LineageReport r = verify_lineage(run.run_dir() / "train-log.0.txt", step, run.ledger().info());
    CHECK(r.ok());
    CHECK(r.incarnations == 2);
    auto l = losses(run.run_dir() / "metrics.jsonl");
    REQUIRE(l.size() > 10);
    double first = 0, last = 0;
    for (std::size_t i = 0; i < 5; ++i) {
        first += l[i] / 5;
        last += l[l.size() - 1 - i] / 5;
    }
    MESSAGE("loss " << first << " -> " << last << " over " << l.size() << " steps");
    CHECK(last < first);
}

TEST_CASE("real workers on CPU with [train] matmul = \"fp8\": emulated FP8, the loss falls, every sample once") {
    test::SynthRun run(240, 1, "lr = 3e-3\nnum_anchors = 16\nwarmup_steps = 2\nmatmul = \"fp8\"\n", "train",
                       "block_size = 4\n");
    std::vector<test::WorkerProc> targets{run.start("target", 0), run.start("target", 1)};
    test::WorkerProc drafter = run.start("drafter", 0);
    int st = run.wait(drafter, 300);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
    for (auto& t : targets) CHECK(WIFEXITED(run.wait(t, 30)));
    const std::uint64_t step = worker::CheckpointStore::read_latest(run.run_dir() / "checkpoints");
    CHECK(verify_lineage(run.run_dir() / "train-log.0.txt", step, run.ledger().info()).ok());
    std::ifstream log(run.run_dir() / "drafter.0.log");
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    CHECK(text.find("layer matmuls in fp8 (emulated on the CPU)") != std::string::npos);
    auto l = losses(run.run_dir() / "metrics.jsonl");
    REQUIRE(l.size() > 10);
    double first = 0, last = 0;
    for (std::size_t i = 0; i < 5; ++i) {
        first += l[i] / 5;
        last += l[l.size() - 1 - i] / 5;
    }
    MESSAGE("loss " << first << " -> " << last << " over " << l.size() << " steps");
    for (double x : l) CHECK(std::isfinite(x));
    CHECK(last < first);
}
