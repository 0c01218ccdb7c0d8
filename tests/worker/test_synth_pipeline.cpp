// Targets and drafter worker processes (synthetic mode) around a real ring and ledger, with the
// test in the supervisor's place. Exactly once: the train log's lineage covers every position of
// every epoch once, and the drafter's checksum state (in its final checkpoint) equals the sum
// over all positions, after clean runs and after SIGKILLs of targets and the drafter.
#include "hsring/train_log.hpp"
#include "pipeline_fixture.hpp"
#include "worker/core/checkpoint_store.hpp"
#include "worker/synth/synth_compute.hpp"

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <fmt/format.h>

#include <fstream>
#include <random>
#include <thread>

using namespace hsring;
using namespace std::chrono_literals;

namespace {

void check_exactly_once(test::SynthRun& run) {
    const auto ckpts = run.run_dir() / "checkpoints";
    const std::uint64_t step = worker::CheckpointStore::read_latest(ckpts);
    REQUIRE(step > 0);
    LineageReport r = verify_lineage(run.run_dir() / "train-log.0.txt", step, run.ledger().info());
    for (std::size_t e = 0; e < r.epochs.size(); ++e) {
        CAPTURE(e);
        CHECK(r.epochs[e].missing == 0);
        CHECK(r.epochs[e].more_than_once == 0);
        CHECK(r.epochs[e].exactly_once == run.ledger().info().samples);
    }
    // The drafter's own state agrees.
    std::ifstream in(ckpts / fmt::format("step-{:08}", step) / "synth_state.txt");
    std::uint64_t sum = 0, count = 0;
    in >> sum >> count;
    REQUIRE(static_cast<bool>(in));
    std::uint64_t want = 0;
    for (std::uint64_t p = 0; p < run.ledger().total(); ++p) want += worker::synth_mix(p);
    CHECK(count == run.ledger().total());
    CHECK(sum == want);
    CHECK(run.ledger().done());
    CHECK(run.ledger().counts().durable == run.ledger().total());
    MESSAGE("final step " << step << ", incarnations " << r.incarnations << ", records " << r.records
                          << ", surviving " << r.surviving);
}

} // namespace

TEST_CASE("2 targets + 1 drafter train every sample of every epoch exactly once") {
    test::SynthRun run(300, 2);
    auto& t0 = run.start("target", 0);
    auto& t1 = run.start("target", 1);
    auto& d = run.start("drafter", 0);
    const pid_t pids[] = {t0.pid, t1.pid, d.pid};  // wait() forgets them
    int st = run.wait(d, 60);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
    int s0 = run.wait(t0, 10), s1 = run.wait(t1, 10);
    CHECK(WIFEXITED(s0));
    CHECK(WIFEXITED(s1));
    check_exactly_once(run);
    CHECK(std::filesystem::exists(run.run_dir() / "metrics.jsonl"));
    // Each worker's last counters stay on the status board, in its own entry.
    const WorkerStats ds = run.status().stats(StatusBoard::kDrafterStatsBase);
    CHECK(ds.pid == pids[2]);
    CHECK(ds.role == 2);
    CHECK(ds.step > 0);
    CHECK(ds.heartbeat_ns > 0);
    const WorkerStats ts0 = run.status().stats(0), ts1 = run.status().stats(1);
    CHECK(ts0.pid == pids[0]);
    CHECK(ts1.pid == pids[1]);
    CHECK(ts1.rank == 1);
    CHECK(ts0.samples + ts1.samples >= run.ledger().total());
}

TEST_CASE("SIGKILLed targets and drafter lose nothing and double nothing") {
    test::SynthRun run(400, 2);
    const std::map<std::string, std::string> slow{{"HSRING_SYNTH_STEP_MS", "4"}};
    std::vector<test::WorkerProc> targets{run.start("target", 0), run.start("target", 1)};
    test::WorkerProc drafter = run.start("drafter", 0, slow);
    std::mt19937 rng(99);
    int drafter_kills = 0, target_kills = 0;
    for (int k = 0; k < 12 && !run.ledger().done(); ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(80 + rng() % 120));
        if (k % 4 == 3) {
            if (!run.alive(drafter)) break;
            run.kill(drafter);
            ++drafter_kills;
            drafter = run.start("drafter", 0, slow);
        } else {
            auto& t = targets[rng() % 2];
            run.kill(t);
            ++target_kills;
            t = run.start("target", t.rank);
        }
    }
    int st = run.wait(drafter, 120);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
    for (auto& t : targets) {
        int ts = run.wait(t, 10);
        CHECK(WIFEXITED(ts));
    }
    MESSAGE("killed targets " << target_kills << " times, the drafter " << drafter_kills << " times");
    CHECK(drafter_kills >= 1);
    check_exactly_once(run);
}
