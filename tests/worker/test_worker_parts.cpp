// Small worker parts: LR schedule, acceptance estimate, checkpoint store commits, pruning and
// crashes at every instant of a commit.
#include "hsring/error.hpp"
#include "worker/core/checkpoint_store.hpp"
#include "worker/core/checkpoint_writer.hpp"
#include "worker/core/lr_schedule.hpp"
#include "hsring/metrics_file.hpp"
#include "worker/core/packer.hpp"
#include "worker/core/plan_room.hpp"
#include "worker/core/responses.hpp"
#include "hsring/ring.hpp"
#include "hsring/acceptance.hpp"

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace hsring::worker;
using hsring::expected_accept_length;
namespace fs = std::filesystem;

TEST_CASE("LR with max_steps: linear warmup, cosine over the steps to the floor, constant after") {
    LrSchedule s{1e-3, 0.1, 10, 110, 0};
    CHECK(s.at(1, 0, 0) == doctest::Approx(1e-4));
    CHECK(s.at(10, 0, 0) == doctest::Approx(1e-3));
    CHECK(s.at(60, 0, 0) == doctest::Approx(1e-4 + 0.9e-3 * 0.5));
    CHECK(s.at(110, 0, 0) == doctest::Approx(1e-4));
    CHECK(s.at(500, 0, 0) == doctest::Approx(1e-4));
}

TEST_CASE("LR without max_steps: cosine over the trained tokens, the floor exactly when every token is trained") {
    // 10 warmup steps trained 1,000 tokens; 9,000 more to go.
    LrSchedule s{1e-3, 0.1, 10, 0, 10000};
    CHECK(s.at(5, 500, 0) == doctest::Approx(5e-4));          // warmup is by steps
    CHECK(s.at(11, 1000, 1000) == doctest::Approx(1e-3));     // no progress yet
    CHECK(s.at(40, 5500, 1000) == doctest::Approx(1e-4 + 0.9e-3 * 0.5));  // half way in tokens
    CHECK(s.at(77, 10000, 1000) == doctest::Approx(1e-4));    // the last step, whatever its number
    CHECK(s.progress(77, 10000, 1000) == doctest::Approx(1.0));
    // The same tokens give the same rate at another step number (a resumed run packs differently).
    CHECK(s.at(41, 5500, 1000) == doctest::Approx(s.at(40, 5500, 1000)));
    LrSchedule flat{1e-3, 0.1, 0, 0, 0};  // length unknown: no decay
    CHECK(flat.at(1, 10, 0) == doctest::Approx(1e-3));
    CHECK(flat.at(1000, 100000, 0) == doctest::Approx(1e-3));
}

TEST_CASE("expected acceptance length from per-position accuracy") {
    double perfect[3] = {1, 1, 1};
    CHECK(hsring::expected_accept_length(perfect, 3) == doctest::Approx(4));
    double half[2] = {0.5, 0.5};
    CHECK(hsring::expected_accept_length(half, 2) == doctest::Approx(1.75));
    double none[2] = {0, 1};
    CHECK(hsring::expected_accept_length(none, 2) == doctest::Approx(1));
}

TEST_CASE("the checkpoint writer: two writes in flight, run in order, collected in order; captures released before done; errors rethrown") {
    CheckpointWriter w;
    CHECK(w.collect() == 0);
    CHECK(w.wait() == 0);
    std::promise<void> release5;
    std::shared_future<void> go5 = release5.get_future().share();
    std::vector<std::uint64_t> order;
    std::mutex order_mu;
    auto buffer = std::make_shared<int>(5);  // a host buffer the job holds
    w.start(5, [&, go5, buf = buffer] {
        go5.wait();
        std::lock_guard lock(order_mu);
        order.push_back(5);
    });
    w.start(10, [&] {
        std::lock_guard lock(order_mu);
        order.push_back(10);
    });
    CHECK(w.in_flight() == 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(w.collect() == 0);           // 10 waits behind 5 (writes commit in step order)
    CHECK(buffer.use_count() == 2);    // held by the write of 5
    release5.set_value();
    CHECK(w.wait() == 10);             // both done: the newest step
    CHECK(w.in_flight() == 0);
    CHECK(buffer.use_count() == 1);    // released with the job
    CHECK(order == std::vector<std::uint64_t>{5, 10});
    // collect() returns the newest of the finished ones, without blocking.
    w.start(15, [] {});
    w.start(20, [] {});
    for (int i = 0; i < 200 && w.collect() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(w.in_flight() <= 1);
    w.wait();
    // A failed write is rethrown when collected; the next one runs.
    w.start(25, [] { throw std::runtime_error("disk full"); });
    CHECK_THROWS_WITH(w.wait(), "disk full");
    w.start(30, [] {});
    CHECK(w.wait() == 30);
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

namespace {

const char* g_crash_at = nullptr;  // the commit instant at which the child process dies

std::string slurp(const fs::path& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

} // namespace

TEST_CASE("a checkpoint replacing one of the same step: a crash at any instant leaves `latest` naming a complete one") {
    // An incarnation that died after committing step 10 (which `latest` names) is followed by one
    // that commits step 10 again. The old code removed the old directory before the rename: a crash
    // in between left `latest` naming nothing, and the run could not resume.
    const fs::path dir = fs::temp_directory_path() / ("hsring-ckpt-crash-" + std::to_string(::getpid()));
    for (const bool exchange : {true, false})  // false: a filesystem without RENAME_EXCHANGE
        for (const char* at : {"synced", "exchanged", "aside", "renamed", "latest", "none"}) {
            CAPTURE(exchange);
            const std::string instant = at;
            CAPTURE(instant);
            fs::remove_all(dir);
            {
                CheckpointStore store(dir, 2);
                for (std::uint64_t s : {5, 10}) {
                    auto tmp = store.begin(s);
                    std::ofstream(tmp / "w.bin") << "old " << s;
                    std::ofstream(tmp / "state.json") << "{}";
                    store.commit(s, tmp);
                }
            }
            const pid_t pid = ::fork();
            REQUIRE(pid >= 0);
            if (pid == 0) {
                g_crash_at = at;
                set_checkpoint_test_hooks({[](const char* instant) {
                                               if (std::strcmp(instant, g_crash_at) == 0) ::_exit(42);
                                           },
                                           exchange});
                try {
                    CheckpointStore store(dir, 2);
                    auto tmp = store.begin(10);
                    std::ofstream(tmp / "w.bin") << "new 10";
                    std::ofstream(tmp / "state.json") << "{}";
                    store.commit(10, tmp);
                } catch (...) {
                    ::_exit(3);
                }
                ::_exit(0);
            }
            int st = 0;
            REQUIRE(::waitpid(pid, &st, 0) == pid);
            REQUIRE(WIFEXITED(st));
            const bool passes = std::strcmp(at, "none") != 0 && (exchange ? std::strcmp(at, "aside") != 0
                                                                          : std::strcmp(at, "exchanged") != 0);
            CHECK(WEXITSTATUS(st) == (passes ? 42 : 0));
            // The next start: `latest` names step 10, complete (the old or the new one, never a
            // mix), and nothing temporary is left.
            CheckpointStore again(dir, 2);
            REQUIRE(again.latest_step() == 10);
            const std::string w = slurp(again.dir_of(10) / "w.bin");
            // The new one once it has its name (or when the commit was not stopped), else the old.
            const bool after_rename = !passes || std::strcmp(at, "renamed") == 0 || std::strcmp(at, "latest") == 0 ||
                                      std::strcmp(at, "exchanged") == 0;
            CHECK(w == (after_rename ? "new 10" : "old 10"));
            CHECK(fs::exists(again.dir_of(10) / "state.json"));
            CHECK(fs::exists(again.dir_of(5)));
            for (const auto& e : fs::directory_iterator(dir))
                CHECK_MESSAGE(e.path().filename().string()[0] != '.', e.path().string());
        }
    fs::remove_all(dir);
}

namespace {
std::string g_immutable_dir;  // what the hook below makes unwritable (chattr +i)
} // namespace

TEST_CASE("a checkpoint directory that turns unwritable between the step's rename and `latest` is a user error") {
    // Seen once in `bin/test` (supervisor_failures): chattr +i landed after the background write
    // renamed its step directory, and writing `latest` ended the drafter with a plain error (exit
    // 1, restarted) instead of the user error every other unwritable moment gives (exit 3).
    const fs::path dir = fs::temp_directory_path() / ("hsring-ckpt-ro-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    if (std::system(("chattr +i " + dir.string() + " 2>/dev/null && chattr -i " + dir.string()).c_str()) != 0) {
        MESSAGE("chattr +i does not work here (not root, or the filesystem): skipped");
        fs::remove_all(dir);
        return;
    }
    g_immutable_dir = dir.string();
    {
        CheckpointStore store(dir, 2);
        auto tmp = store.begin(5);
        std::ofstream(tmp / "state.json") << "{}";
        set_checkpoint_test_hooks({[](const char* instant) {
                                       if (std::strcmp(instant, "renamed") == 0)
                                           CHECK(std::system(("chattr +i " + g_immutable_dir).c_str()) == 0);
                                   },
                                   true});
        std::string msg;
        try {
            store.commit(5, tmp);
        } catch (const hsring::UserError& e) {
            msg = e.what();
        } catch (const std::exception& e) {
            msg = std::string("not a user error: ") + e.what();
        }
        set_checkpoint_test_hooks({});
        CHECK(std::system(("chattr -i " + dir.string()).c_str()) == 0);
        CHECK_MESSAGE(msg.find("the checkpoint directory " + dir.string() + " is not writable") != std::string::npos, msg);
    }
    fs::remove_all(dir);
}

// A peer writer out of buffers while writing an earlier plan slot than its READY commits hold (a
// target's death re-issued it, or a drafter rolled back): it gives the latest of its own back.
TEST_CASE("a writer out of peer buffers gives back its own latest later plan slot, never an earlier or another's") {
    using namespace std::chrono_literals;
    hsring::RingGeometry g;
    g.slot_count = 6;
    g.slot_tokens = 16;
    g.n_layers = 1;
    g.hidden = 8;
    g.dtype_bytes = 2;
    g.slot_bytes = 16 * 8 * 2;
    g.max_samples = 4;
    const std::string name = "hsring-test-planroom-" + std::to_string(::getpid());
    hsring::Ring ring = hsring::Ring::create({name, g, hsring::HugePages::Off, true});
    ring.join(hsring::Role::Writer, 1, "test");
    std::vector<std::uint64_t> repended;
    ring.set_reclaim_hook([&](std::uint64_t t) { repended.push_back(t); });
    std::map<std::uint64_t, std::uint64_t> ticket_of;  // plan slot -> ticket
    auto commit = [&](std::uint64_t plan, hsring::Copies copies) {
        auto w = ring.claim(0ms);
        REQUIRE(w);
        PackedBatch b;
        b.plan_slot = plan;
        b.positions = {plan};
        b.lengths = {1};
        b.tokens = {1};
        b.loss_mask = {1};
        b.flags = {0};
        write_meta(w->meta(), b, 0);
        w->set_copies(copies);
        ticket_of[plan] = w->ticket();
        REQUIRE(w->commit());
    };
    commit(5, hsring::Copies::Peer);
    commit(7, hsring::Copies::Peer);
    commit(6, hsring::Copies::HostAndPeer);
    commit(9, hsring::Copies::Host);  // in the host ring only: holds none of our buffers
    auto writing = ring.claim(0ms);
    REQUIRE(writing);
    PackedBatch b;
    b.plan_slot = 3;
    write_meta(writing->meta(), b, 0);
    CHECK(give_back_later_commit(ring, *writing));  // plan slot 7: the latest of ours
    REQUIRE(repended.size() == 1);
    CHECK(repended[0] == ticket_of[7]);
    CHECK(give_back_later_commit(ring, *writing));  // then 6 (peer+host)
    CHECK(give_back_later_commit(ring, *writing));  // then 5
    CHECK(repended == std::vector<std::uint64_t>{ticket_of[7], ticket_of[6], ticket_of[5]});
    CHECK_FALSE(give_back_later_commit(ring, *writing));  // only the host-ring slot is left
    const auto occ = ring.occupancy();
    CHECK(occ.ready == 1);
    CHECK(occ.free == 4);
    // Nothing later than the batch being written: nothing given back.
    commit(2, hsring::Copies::Peer);
    CHECK_FALSE(give_back_later_commit(ring, *writing));
    CHECK(repended.size() == 3);
    writing->abort();
    hsring::Ring::remove(name);
}

TEST_CASE("answer_templates: each turn answered from everything before it, cut to its room, seeded per sample and turn") {
    // Two templates (hsring/dataset.hpp): [1 2 | room 3 | 5 | room 2] and [7 | room 3].
    PackedBatch b;
    b.positions = {10, 11};
    b.flags = {0, 0};
    b.keys = {4, 9 | (std::uint64_t{1} << 32)};
    b.lengths = {8, 4};
    b.tokens = {1, 2, 0, 0, 0, 5, 0, 0, 7, 0, 0, 0};
    b.loss_mask = {0, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1};
    std::vector<std::vector<AnswerRequest>> calls;
    // A "model" that answers with the prompt's length, then 100 + its last token, then a stop.
    auto gen = [&](const std::vector<AnswerRequest>& rs) {
        calls.push_back(rs);
        std::vector<std::vector<std::int64_t>> out;
        for (const auto& r : rs) out.push_back({std::int64_t(r.prompt.size()), 100 + r.prompt.back(), 99});
        return out;
    };
    const std::uint64_t kept = answer_templates(b, 7, gen);
    REQUIRE(calls.size() == 2);  // turn 0 of both samples together, then turn 1 of the first
    REQUIRE(calls[0].size() == 2);
    CHECK(calls[0][0].prompt == std::vector<std::int64_t>{1, 2});
    CHECK(calls[0][1].prompt == std::vector<std::int64_t>{7});
    CHECK(calls[0][0].room == 3);
    REQUIRE(calls[1].size() == 1);
    CHECK(calls[1][0].prompt == std::vector<std::int64_t>{1, 2, 2, 102, 99, 5});  // its own first answer in it
    CHECK(calls[1][0].room == 2);
    CHECK(b.lengths == std::vector<std::uint32_t>{8, 4});
    CHECK(b.tokens == std::vector<std::int32_t>{1, 2, 2, 102, 99, 5, 6, 105, 7, 1, 107, 99});
    CHECK(b.loss_mask == std::vector<std::uint8_t>{0, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1});
    CHECK(kept == 8);
    // Streams: a function of (seed, key, turn) only, all different.
    CHECK(calls[0][0].seed == answer_seed(7, 4, 0));
    CHECK(calls[1][0].seed == answer_seed(7, 4, 1));
    CHECK(calls[0][1].seed == answer_seed(7, 9 | (std::uint64_t{1} << 32), 0));
    CHECK(answer_seed(7, 4, 0) != answer_seed(7, 4, 1));
    CHECK(answer_seed(7, 4, 0) != answer_seed(8, 4, 0));
    CHECK(answer_seed(7, 4, 0) != answer_seed(7, 4 | (std::uint64_t{1} << 32), 0));
}
