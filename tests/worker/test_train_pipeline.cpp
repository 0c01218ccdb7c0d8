// The real workers (LibTorch, CPU) around a ring and ledger, the test in the supervisor's place:
// a tiny Qwen3 target and a 1-layer DFlash drafter; the loss falls, every sample is trained
// exactly once, a SIGKILLed drafter resumes from its checkpoint, and the export loads back.
#include "hsring/train_log.hpp"
#include "pipeline_fixture.hpp"
#include "worker/checkpoint_store.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <sys/wait.h>

#include <fstream>
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
