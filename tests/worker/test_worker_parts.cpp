// Small worker parts: LR schedule, acceptance estimate, checkpoint store commits and pruning.
#include "worker/checkpoint_store.hpp"
#include "worker/lr_schedule.hpp"
#include "worker/metrics.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

using namespace hsring::worker;
namespace fs = std::filesystem;

TEST_CASE("LR: linear warmup, cosine to the floor, constant after") {
    LrSchedule s{1e-3, 0.1, 10, 110};
    CHECK(s.at(1) == doctest::Approx(1e-4));
    CHECK(s.at(10) == doctest::Approx(1e-3));
    CHECK(s.at(60) == doctest::Approx(1e-4 + 0.9e-3 * 0.5));
    CHECK(s.at(110) == doctest::Approx(1e-4));
    CHECK(s.at(500) == doctest::Approx(1e-4));
    LrSchedule flat{1e-3, 0.1, 0, 0};
    CHECK(flat.at(1) == doctest::Approx(1e-3));
    CHECK(flat.at(1000) == doctest::Approx(1e-3));
}

TEST_CASE("expected acceptance length from per-position accuracy") {
    double perfect[3] = {1, 1, 1};
    CHECK(hsring::expected_accept_length(perfect, 3) == doctest::Approx(4));
    double half[2] = {0.5, 0.5};
    CHECK(hsring::expected_accept_length(half, 2) == doctest::Approx(1.75));
    double none[2] = {0, 1};
    CHECK(hsring::expected_accept_length(none, 2) == doctest::Approx(1));
}

TEST_CASE("checkpoints commit atomically, `latest` follows, old ones are pruned") {
    fs::path dir = fs::temp_directory_path() / ("hsring-ckpt-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    {
        CheckpointStore store(dir, 2);
        CHECK(store.latest_step() == 0);
        for (std::uint64_t s : {5, 10, 15}) {
            auto tmp = store.begin(s);
            std::ofstream(tmp / "w.bin") << s;
            store.commit(s, tmp);
            CHECK(store.latest_step() == s);
        }
        CHECK_FALSE(fs::exists(store.dir_of(5)));
        CHECK(fs::exists(store.dir_of(10)));
        CHECK(fs::exists(store.dir_of(15)));
        // A checkpoint that was being written when the process died is ignored and cleaned.
        auto tmp = store.begin(20);
        std::ofstream(tmp / "w.bin") << 20;
    }
    CheckpointStore again(dir, 2);
    CHECK(again.latest_step() == 15);
    CHECK_FALSE(fs::exists(dir / ".tmp-step-00000020"));
    // `latest` naming a missing directory is a clear error, not a silent restart from scratch.
    fs::remove_all(again.dir_of(15));
    CHECK_THROWS_WITH(again.latest_step(), doctest::Contains("directory is missing"));
    fs::remove_all(dir);
}
