// The supervisor's pure parts: restart decisions, exit reasons, pipe lines, worker names,
// run.json, the status line.
#include "hsring/error.hpp"
#include "hsring/liveness.hpp"
#include "hsring/safe_file.hpp"
#include "supervisor/control_client.hpp"
#include "supervisor/control_server.hpp"
#include "supervisor/exit_reason.hpp"
#include "supervisor/line_reader.hpp"
#include "supervisor/restart_policy.hpp"
#include "supervisor/resume_rules.hpp"
#include "hsring/run_identity.hpp"
#include "hsring/train_log.hpp"
#include "supervisor/run_files.hpp"
#include "supervisor/run_verify.hpp"
#include "supervisor/spec_final.hpp"
#include "supervisor/status.hpp"
#include "supervisor/worker_spec.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <poll.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace hsring;
using namespace hsring::supervisor;
using namespace std::chrono_literals;

namespace {

SupervisorConfig sup(Restart r, std::uint32_t max_restarts = 3) {
    SupervisorConfig c;
    c.restart = r;
    c.max_restarts = max_restarts;
    c.restart_window_s = 60;
    c.backoff_initial_s = 0.5;
    c.backoff_max_s = 3;
    return c;
}

} // namespace

TEST_CASE("on-failure restarts a failed worker with doubling backoff, capped, then gives up") {
    RestartPolicy p(sup(Restart::OnFailure, 4));
    RestartHistory h;
    auto t = Clock::now();
    std::vector<double> delays;
    for (int i = 0; i < 4; ++i) {
        auto d = p.decide(true, h, t + std::chrono::seconds(i));
        REQUIRE(d.kind == RestartDecision::Restart);
        delays.push_back(d.delay.count());
    }
    CHECK(delays == std::vector<double>{0.5, 1.0, 2.0, 3.0});  // 4.0 capped at backoff_max_s
    auto d = p.decide(true, h, t + 5s);
    CHECK(d.kind == RestartDecision::GiveUp);
    CHECK(d.why.find("max_restarts = 4") != std::string::npos);
    CHECK(h.total() == 4);
}

TEST_CASE("restarts older than the window no longer count") {
    RestartPolicy p(sup(Restart::OnFailure, 2));
    RestartHistory h;
    auto t = Clock::now();
    CHECK(p.decide(true, h, t).kind == RestartDecision::Restart);
    CHECK(p.decide(true, h, t + 1s).kind == RestartDecision::Restart);
    CHECK(p.decide(true, h, t + 2s).kind == RestartDecision::GiveUp);
    // A minute later the window is empty again: back to the initial delay.
    auto d = p.decide(true, h, t + 62s);
    CHECK(d.kind == RestartDecision::Restart);
    CHECK(d.delay.count() == doctest::Approx(0.5));
}

TEST_CASE("a clean exit is restarted only under always; never gives up on a failure") {
    RestartHistory h;
    CHECK(RestartPolicy(sup(Restart::OnFailure)).decide(false, h, Clock::now()).kind == RestartDecision::NoRestart);
    CHECK(RestartPolicy(sup(Restart::Never)).decide(false, h, Clock::now()).kind == RestartDecision::NoRestart);
    CHECK(RestartPolicy(sup(Restart::Always)).decide(false, h, Clock::now()).kind == RestartDecision::Restart);
    auto d = RestartPolicy(sup(Restart::Never)).decide(true, h, Clock::now());
    CHECK(d.kind == RestartDecision::GiveUp);
    CHECK(d.why.find("never") != std::string::npos);
}

TEST_CASE("max_restarts = 0 gives up at the first failure") {
    RestartHistory h;
    CHECK(RestartPolicy(sup(Restart::OnFailure, 0)).decide(true, h, Clock::now()).kind == RestartDecision::GiveUp);
}

TEST_CASE("exit reasons in words") {
    auto status_of = [](auto child) {
        pid_t pid = ::fork();
        if (pid == 0) child();
        int st = 0;
        ::waitpid(pid, &st, 0);
        return ExitReason::from_wait_status(st);
    };
    ExitReason a = status_of([] { ::_exit(3); });
    CHECK(a.code == 3);
    CHECK(a.fatal());
    CHECK(a.str() == "exit code 3");
    ExitReason b = status_of([] { ::raise(SIGKILL); ::_exit(0); });
    CHECK(b.failed());
    CHECK(b.signal == SIGKILL);
    CHECK(b.str() == "killed by SIGKILL");
    ExitReason c = status_of([] { ::_exit(0); });
    CHECK_FALSE(c.failed());
    CHECK(signal_name(SIGTERM) == "SIGTERM");
}

TEST_CASE("the message of a worker that stopped the run is its last error line since its last start") {
    // A wrong master_port: the worker's one-line error, then what libraries print at exit (the
    // supervisor used to repeat that last stderr line: a lone ")" of a c10d backtrace).
    const std::string log =
        "--- hsring: drafter.0 started: pid 11, incarnation 0, cpu (gang)\n"
        "08:00:00.001 drafter.0 E an older incarnation's error\n"
        "--- hsring: drafter.0 started: pid 12, incarnation 1, cpu (gang)\n"
        "08:00:01.000 drafter.0 I joining the gang\n"
        "[W socket.cpp:752] The client socket has timed out after 3000ms\n"
        "08:00:04.002 drafter.0 E cannot reach the master 127.0.0.1:29769 within 3 s ([distributed] timeout_s)\n"
        ")\n"
        "--- hsring: drafter.0 exited with code 3\n";
    CHECK(last_error_message_in(log, "drafter.0", ")") ==
          "cannot reach the master 127.0.0.1:29769 within 3 s ([distributed] timeout_s)");
    // Another worker's lines and an incarnation without an error line: the fallback.
    CHECK(last_error_message_in(log, "drafter.1", "fallback") == "fallback");
    CHECK(last_error_message_in("--- hsring: drafter.0 started: pid 13\nplain text\n", "drafter.0", "plain text") ==
          "plain text");
    // A log that is not there: the fallback.
    CHECK(last_error_message("/nonexistent/hsring/drafter.0.log", "drafter.0", "the last line") == "the last line");
}

TEST_CASE("pipe output is split into lines, a torn last line is flushed, a huge line is cut") {
    int fds[2];
    REQUIRE(::pipe2(fds, O_NONBLOCK) == 0);
    std::vector<std::string> lines;
    auto on = [&](std::string_view l) { lines.emplace_back(l); };
    LineReader r;
    std::string text = "one\ntwo\r\nthr";
    REQUIRE(::write(fds[1], text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    CHECK(r.pump(fds[0], on));  // nothing more now, but not at end of file
    CHECK(lines == std::vector<std::string>{"one", "two"});
    REQUIRE(::write(fds[1], "ee", 2) == 2);
    ::close(fds[1]);
    CHECK_FALSE(r.pump(fds[0], on));
    r.flush(on);
    CHECK(lines.back() == "three");
    ::close(fds[0]);

    REQUIRE(::pipe2(fds, O_NONBLOCK) == 0);
    lines.clear();
    LineReader big;
    std::string blob(LineReader::kMaxLine + 10, 'x');
    std::size_t off = 0;
    while (off < blob.size()) {  // the pipe holds 64 KiB: feed and read in turns
        ssize_t n = ::write(fds[1], blob.data() + off, blob.size() - off);
        if (n > 0) off += static_cast<std::size_t>(n);
        big.pump(fds[0], on);
    }
    ::close(fds[1]);
    big.pump(fds[0], on);
    big.flush(on);
    ::close(fds[0]);
    REQUIRE(lines.size() == 2);
    CHECK(lines[0].size() == LineReader::kMaxLine);
    CHECK(lines[1].size() == 10);
}

TEST_CASE("workers are named by role and rank; an unknown name lists the valid ones") {
    Config cfg;
    cfg.topology.targets = {Place{0}, Place{1}};
    cfg.topology.drafters = {Place{2}};
    cfg.run.mode = RunMode::Synthetic;
    auto specs = worker_specs(cfg);
    REQUIRE(specs.size() == 3);
    CHECK(specs[1].name == "target.1");
    CHECK(specs[2].name == "drafter.0");
    CHECK(specs[2].stats_index == kDrafterStatsBase);
    CHECK(specs[0].program == "hsring-synth-worker");
    CHECK(specs[0].role_args == std::vector<std::string>{"--role", "target"});
    CHECK(find_worker(specs, "drafter.0") == 2);
    CHECK_THROWS_WITH_AS(find_worker(specs, "drafter.1"),
                         "unknown worker 'drafter.1': this run's workers are target.0, target.1, drafter.0", Error);
    cfg.run.mode = RunMode::Train;
    CHECK(worker_specs(cfg)[2].program == "hsring-drafter");
}

TEST_CASE("run.json round-trips; the latest checkpoint is a step or absent") {
    namespace fs = std::filesystem;
    RunFiles files{fs::temp_directory_path() / ("hsring-sup-unit-" + std::to_string(::getpid()))};
    fs::create_directories(files.dir / "checkpoints");
    RunRecord r;
    r.config = "/x/run.toml";
    r.ring = "hsring-x";
    r.ledger = "hsring-x-ledger";
    r.samples = 12;
    r.epochs = 3;
    r.fingerprint = 0xfedcba9876543210ull;
    r.seed = 99;
    r.shuffle = false;
    r.nnodes = 2;
    r.node_rank = 1;
    r.drafters = 3;
    r.started = iso_time_now();
    r.supervisor_pid = 42;
    r.workers = {{"target.0", 43, 7, 1234}};
    r.end = RunEnd{"t", 1, "why", true};
    r.max_steps = 7;
    write_run_record(files, r);
    RunRecord back = read_run_record(files.run_json());
    CHECK(back.fingerprint == r.fingerprint);
    CHECK(back.ledger_info().epochs == 3);
    CHECK_FALSE(back.ledger_info().shuffle);
    // Machine 1 of 2 holds half of the 12 samples of each epoch.
    CHECK(back.drafters == 3);
    CHECK(back.ledger_info().samples == 6);
    CHECK(back.ledger_info().dataset_samples == 12);
    CHECK(back.ledger_info().node_rank == 1);
    CHECK(back.workers.at(0).incarnation == 7);
    CHECK(back.end->reason == "why");
    CHECK(back.end->complete);
    CHECK(back.max_steps == 7);

    CHECK_FALSE(read_latest_checkpoint(files).has_value());
    std::ofstream(files.latest_checkpoint()) << "200\n";
    CHECK(read_latest_checkpoint(files) == 200u);
    std::ofstream(files.latest_checkpoint()) << "2x0\n";
    CHECK_THROWS_AS(read_latest_checkpoint(files), Error);
    fs::remove_all(files.dir);
}

namespace {

// Machine `node` of a finished 2-machine run of 4 samples, 1 epoch, in `dir`: its run.json, a
// checkpoint of step 1 and a train log holding its 2 ledger positions, trained in step 1.
RunRecord write_machine(const std::filesystem::path& dir, std::uint32_t node, const nlohmann::json& identity,
                        std::uint32_t master_port) {
    std::filesystem::create_directories(dir / "checkpoints");
    RunRecord r;
    r.config = "/x/run.toml";
    r.ring = r.name = "m" + std::to_string(node);  // machines on one host have names of their own
    r.ledger = r.ring + "-ledger";
    r.samples = 4;
    r.fingerprint = 0xabcull;
    r.seed = 3;
    r.nnodes = 2;
    r.node_rank = node;
    r.started = iso_time_now();
    r.supervisor_pid = 42;
    r.master_addr = node == 0 ? "127.0.0.1" : "10.0.0.1";  // machine 0 may reach itself otherwise
    r.master_port = master_port;
    r.identity = identity;
    r.end = RunEnd{"t", 0, "complete", true};
    write_run_record(RunFiles{dir}, r);
    std::ofstream(dir / "checkpoints" / "latest") << "1\n";
    TrainLog log(dir / "train-log.0.txt");
    log.resume(1, 0);
    const std::vector<std::uint64_t> positions{0, 1};
    log.trained(1, 1, positions);
    log.checkpoint(1, 1);
    log.sync();
    return r;
}

std::string verify_error(const std::vector<std::filesystem::path>& dirs) {
    try {
        verify_run_dirs(dirs);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST_CASE("ledger verify refuses the run dirs of two different runs, naming what differs") {
    namespace fs = std::filesystem;
    const fs::path root = fs::temp_directory_path() / ("hsring-sup-verify-" + std::to_string(::getpid()));
    const fs::path a0 = root / "a0", a1 = root / "a1", b1 = root / "b1", old0 = root / "old0", old1 = root / "old1";
    const nlohmann::json id_a = {{"[train] lr", 0.0006}, {"[data] epochs", 1}};
    nlohmann::json id_b = id_a;
    id_b["[train] lr"] = 0.001;
    write_machine(a0, 0, id_a, 29511);
    write_machine(a1, 1, id_a, 29511);
    // One run: machines of one run differ only in what is theirs (name, ring, master address).
    const RunVerification ok = verify_run_dirs({a0, a1});
    CHECK(ok.report.ok());
    CHECK(ok.finished);

    // Machine 1 of another run of the same data set: another setting ...
    write_machine(b1, 1, id_b, 29511);
    std::string e = verify_error({a0, b1});
    CHECK(e.find("belong to different runs") != std::string::npos);
    CHECK(e.find("[train] lr is 0.0006 in " + a0.string() + ", 0.001 in " + b1.string()) != std::string::npos);
    // ... or another rendezvous port.
    write_machine(b1, 1, id_a, 29600);
    e = verify_error({a0, b1});
    CHECK(e.find("[distributed] master_port is 29511 in " + a0.string() + ", 29600 in " + b1.string()) !=
          std::string::npos);
    // The data facts are named one by one.
    RunRecord r = read_run_record(RunFiles{b1}.run_json());
    r.master_port = 29511;
    r.seed = 4;
    write_run_record(RunFiles{b1}, r);
    CHECK(verify_error({a0, b1}).find("[run] seed is 3 in " + a0.string() + ", 4 in " + b1.string()) !=
          std::string::npos);

    // A run.json of an older hsring holds neither identity nor port: unknown, not a difference.
    write_machine(old0, 0, nullptr, 0);
    write_machine(old1, 1, nullptr, 0);
    for (const auto& dir : {old0, old1}) {
        nlohmann::json j = nlohmann::json::parse(*safe::read_file(dir / "run.json"));
        for (const char* key : {"name", "master_addr", "master_port", "identity"}) j.erase(key);
        std::ofstream(dir / "run.json") << j.dump(2);
        const RunRecord back = read_run_record(RunFiles{dir}.run_json());
        CHECK(back.name.empty());
        CHECK(back.master_port == 0);
        CHECK(back.identity.is_null());
    }
    CHECK(verify_run_dirs({old0, old1}).report.ok());
    CHECK(verify_run_dirs({old0, a1}).report.ok());

    // Two dirs of machine 0: of two runs (named as such, not "both machine 0"), or one dir twice.
    const fs::path c0 = root / "c0";
    write_machine(c0, 0, id_b, 29511);
    e = verify_error({a0, c0});
    CHECK(e.find(a0.string() + " and " + c0.string() + " belong to different runs: [train] lr is 0.0006") !=
          std::string::npos);
    CHECK(e.find("both machine") == std::string::npos);
    write_machine(c0, 0, id_a, 29511);
    CHECK(verify_error({a0, c0}).find("are both machine 0 of the run") != std::string::npos);
    fs::remove_all(root);
}

TEST_CASE("a socket path over 107 bytes is refused with the fix") {
    CHECK_NOTHROW(check_socket_path("/tmp/run/control.sock"));
    const std::string long_path = "/tmp/" + std::string(120, 'd') + "/control.sock";
    CHECK_THROWS_WITH_AS(check_socket_path(long_path), doctest::Contains("--run-dir"), Error);
}

std::uint64_t now_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

TEST_CASE("a worker stopped by a signal, or silent for long, shows so and no stale rates") {
    StatusInputs in;
    in.phase = "running";
    WorkerStatus t;
    t.name = "target.0";
    t.role = "target";
    t.state = "running";
    t.pid = 10;
    t.has_stats = true;
    t.rate = {40, 12345};
    t.stats.heartbeat_ns = now_ns();
    t.suspended = true;
    WorkerStatus u = t;
    u.name = "target.1";
    u.suspended = false;
    u.stats.heartbeat_ns = now_ns() - 120ull * 1000000000ull;  // silent for two minutes
    in.workers = {t, u};
    auto j = status_json(in);
    CHECK(j["workers"][0]["state"] == "suspended");
    CHECK(j["workers"][0]["tokens_per_s"] == 0.0);
    CHECK(j["workers"][1]["tokens_per_s"] == 0.0);
    CHECK(j["rates"]["target"]["tokens_per_s"] == 0.0);
    const std::string text = status_text(j);
    CHECK(text.find("suspended") != std::string::npos);
    CHECK(text.find("stopped by a signal (SIGCONT resumes it)") != std::string::npos);
    CHECK(text.find("no heartbeat for 2m00s") != std::string::npos);
}

TEST_CASE("the status line shows rates, the ring bar, step, loss, progress and restarts") {
    StatusInputs in;
    in.name = "x";
    in.phase = "running";
    WorkerStatus t;
    t.name = "target.0";
    t.role = "target";
    t.state = "running";
    t.pid = 10;
    t.has_stats = true;
    t.rate = {40, 12345};
    t.stats.heartbeat_ns = now_ns();  // it publishes: its rates are current
    WorkerStatus d;
    d.name = "drafter.0";
    d.role = "drafter";
    d.state = "running";
    d.pid = 11;
    d.restarts = 2;
    d.has_stats = true;
    d.stats.step = 120;
    d.stats.loss = 2.345;
    d.stats.heartbeat_ns = now_ns();
    in.workers = {t, d};
    in.slots = 8;
    in.occupancy = {4, 1, 2, 1};
    in.total = 1000;
    in.counts = {400, 88, 12, 500};
    auto j = status_json(in);
    CHECK(j["workers"][1]["restarts"] == 2);
    CHECK(j["ring"]["ready"] == 2);
    const std::string line = status_line(j);
    CHECK(line.find("target 12.3k tok/s 40 smp/s") != std::string::npos);
    CHECK(line.find("[#==+....]") != std::string::npos);
    CHECK(line.find("step 120 loss 2.345") != std::string::npos);
    CHECK(line.find("512/1000 51%") != std::string::npos);
    CHECK(line.find("restarts 2") != std::string::npos);
    const std::string text = status_text(j);
    CHECK(text.find("drafter.0") != std::string::npos);
    CHECK(text.find("2 ready") != std::string::npos);
    CHECK(j["ring"]["counters"]["peer_lost"] == 0);
    CHECK(text.find("lost with their target") == std::string::npos);  // host transport: never
    in.counters.peer_lost = 3;
    const auto k = status_json(in);
    CHECK(k["ring"]["counters"]["peer_lost"] == 3);
    CHECK(status_text(k).find("3 READY slots lost with their target's GPU") != std::string::npos);
    CHECK(line.find("tau") == std::string::npos);  // no measurement yet
}

TEST_CASE("tau: the last measurement in metrics.jsonl reaches the status line and report") {
    const auto dir = std::filesystem::temp_directory_path() / ("hsring-tau-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto metrics = dir / "metrics.jsonl";
    CHECK(last_tau(metrics).is_null());  // no file yet
    {
        std::ofstream f(metrics);
        f << R"({"step": 10, "loss": 2.0})" "\n"
          << R"({"step": 14, "spec": {"tau": 1.25, "step": 14, "prompts": 6, "verify_steps": 40, "final": false}})" "\n"
          << R"({"step": 20, "spec": {"tau": 1.5, "step": 20, "prompts": 6, "verify_steps": 38, "final": false}})" "\n"
          << R"({"step": 21, "loss": 1.9})" "\n";
    }
    StatusInputs in;
    in.name = "x";
    in.spec = last_tau(metrics);
    REQUIRE(in.spec.is_object());
    CHECK(in.spec["step"] == 20);
    const auto j = status_json(in);
    CHECK(status_line(j).find("tau 1.50@20") != std::string::npos);
    CHECK(status_text(j).find("tau: 1.500 after step 20 (6 prompts, 38 verify steps") != std::string::npos);
    // spec-decode's JSON -> the row's object: per-position acceptance from the acceptance lengths.
    const auto sp = spec_summary(nlohmann::json::parse(R"({"tau": 2.0, "block_size": 4, "verify_steps": 4, "new_tokens": 9,
        "lossless": true, "speedup": 1.1, "prompts": [{"acceptance_lengths": [1, 2, 4]}, {"acceptance_lengths": [1]}]})"),
                                 30, true);
    CHECK(sp["acceptance_per_position"] == nlohmann::json::array({0.5, 0.25, 0.25}));
    CHECK(sp["final"] == true);
    CHECK(sp["prompts"] == 2);
    std::filesystem::remove_all(dir);
}

TEST_CASE("rates come from the worker's heartbeats over a window and restart with a new process") {
    RateMeter m;
    WorkerStats s;
    s.pid = 5;
    const std::uint64_t sec = 1000000000ull;
    s.heartbeat_ns = 100 * sec;
    CHECK(m.update("t", s).tokens_per_s == 0);
    s.heartbeat_ns += sec / 2;
    s.tokens = 500;
    s.samples = 5;
    CHECK(m.update("t", s).tokens_per_s == doctest::Approx(1000));
    // No new heartbeat (the status ticks faster than the worker publishes): the rate stays.
    CHECK(m.update("t", s).tokens_per_s == doctest::Approx(1000));
    s.heartbeat_ns += sec / 2;
    s.tokens = 1500;
    CHECK(m.update("t", s).tokens_per_s == doctest::Approx(1500));
    CHECK(m.last("t").samples_per_s == doctest::Approx(5));
    s.pid = 6;  // restarted: counters from zero
    s.tokens = 10;
    s.heartbeat_ns += sec;
    CHECK(m.update("t", s).tokens_per_s == 0);
}

TEST_CASE("the wait fraction of each side names the bottleneck and what to change") {
    RateMeter m;
    WorkerStats s;
    s.pid = 5;
    const std::uint64_t sec = 1000000000ull;
    s.heartbeat_ns = 100 * sec;
    m.update("target.0", s);
    s.heartbeat_ns += sec;
    s.busy_ns = sec / 10;  // 0.1 s computing, 0.9 s waiting for a free slot
    s.wait_ns = 9 * sec / 10;
    CHECK(m.update("target.0", s).wait_fraction == doctest::Approx(0.9));

    StatusInputs in;
    in.phase = "running";
    WorkerStatus t, d;
    t.name = "target.0";
    t.role = "target";
    t.has_stats = true;
    t.rate = {1, 100, 0.9};
    d.name = "drafter.0";
    d.role = "drafter";
    d.has_stats = true;
    d.rate = {1, 100, 0.02};
    in.workers = {t, d};
    nlohmann::json j = status_json(in);
    CHECK(j["balance"]["bottleneck"] == "drafters");
    CHECK(j["balance"]["advice"].get<std::string>().find("add drafter GPUs ([topology] drafters)") != std::string::npos);
    CHECK(status_line(j).find("wait T 90% D 2%") != std::string::npos);
    CHECK(status_text(j).find("balance: targets wait 90% of their time") != std::string::npos);
    in.workers[0].rate.wait_fraction = 0.01;
    in.workers[1].rate.wait_fraction = 0.8;
    j = status_json(in);
    CHECK(j["balance"]["bottleneck"] == "targets");
    CHECK(j["balance"]["advice"].get<std::string>().find("add target GPUs ([topology] targets)") != std::string::npos);
    in.workers[1].rate.wait_fraction = 0.3;
    CHECK(status_json(in)["balance"]["bottleneck"] == "none");
    in.workers[1].rate.wait_fraction = -1;  // not measured yet
    CHECK(status_json(in)["balance"]["drafters_wait"].is_null());
}

// --- reliability (issue 12) -------------------------------------------------------------------

namespace {

std::filesystem::path temp_dir(const std::string& tag) {
    auto d = std::filesystem::temp_directory_path() / ("hsring-sup-unit-" + tag + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    return d;
}

} // namespace

TEST_CASE("a control handler that throws anything answers with an error and the supervisor goes on") {
    namespace fs = std::filesystem;
    const fs::path dir = temp_dir("ctl");
    fs::create_directories(dir);
    ControlServer server(dir / "control.sock");
    auto throwing = [](const nlohmann::json&) -> ControlReply { throw std::out_of_range("map::at"); };
    for (int round = 0; round < 2; ++round) {  // and it still answers the next request
        std::atomic<bool> done{false};
        std::string error;
        std::thread client([&] {
            try {
                ControlClient(dir).request({{"cmd", "status"}}, std::chrono::seconds(5));
            } catch (const Error& e) {
                error = e.what();
            }
            done = true;
        });
        for (int i = 0; i < 1000 && !done; ++i) {
            std::vector<pollfd> fds;
            server.poll_fds(fds);
            ::poll(fds.data(), fds.size(), 5);
            CHECK_NOTHROW(server.service(fds, throwing));
        }
        client.join();
        CHECK(error.find("the supervisor could not answer: map::at") != std::string::npos);
    }
    fs::remove_all(dir);
}

TEST_CASE("signal_process signals a pid only while it is the process that started at that time") {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::pause();
        ::_exit(0);
    }
    std::uint64_t ticks = 0;
    while (!(ticks = process_start_ticks(child))) ::usleep(1000);
    CHECK_FALSE(signal_process(child, ticks + 1, SIGKILL));  // a reused pid: spared
    CHECK_FALSE(signal_process(child, 0, SIGKILL));          // start time unknown: spared
    CHECK(process_alive(child, ticks));
    CHECK(signal_process(child, ticks, SIGKILL));
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
    CHECK_FALSE(signal_process(child, ticks, SIGKILL));  // gone
}

TEST_CASE("run-dir files are opened without following links; temporaries are fresh") {
    namespace fs = std::filesystem;
    const fs::path dir = temp_dir("safe");
    safe::make_private_dir(dir);
    struct stat st{};
    REQUIRE(::stat(dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    const fs::path victim = dir.parent_path() / ("hsring-victim-" + std::to_string(::getpid()));
    std::ofstream(victim) << "precious\n";
    fs::create_symlink(victim, dir / "metrics.jsonl");
    fs::create_directories(dir / "real");
    fs::create_directory_symlink(dir / "real", dir / "logs");
    CHECK_THROWS_WITH_AS(safe::open_beneath(dir, "metrics.jsonl", O_WRONLY | O_CREAT | O_APPEND),
                         doctest::Contains("is a symbolic link: refusing to follow it"), Error);
    CHECK_THROWS_WITH_AS(safe::open_beneath(dir, "logs/target.0.log", O_WRONLY | O_CREAT | O_APPEND),
                         doctest::Contains("symbolic link"), Error);
    CHECK_THROWS_AS(safe::read_beneath(dir, "metrics.jsonl"), Error);
    // A link at the temporary's name is removed, never written through.
    fs::create_symlink(victim, dir / "run.json.tmp");
    safe::write_atomic(dir, "run.json", "{}\n", true);
    CHECK(safe::read_beneath(dir, "run.json") == std::optional<std::string>("{}\n"));
    CHECK_FALSE(fs::exists(fs::symlink_status(dir / "run.json.tmp")));
    CHECK_FALSE(safe::read_beneath(dir, "nothing/here").has_value());
    CHECK(safe::read_file(victim) == std::optional<std::string>("precious\n"));
    // A run dir others may write into is refused.
    ::chmod(dir.c_str(), 0777);
    CHECK_THROWS_WITH_AS(safe::make_private_dir(dir), doctest::Contains("has mode 0777"), Error);
    fs::remove_all(dir);
    fs::remove(victim);
}

TEST_CASE("resume rules: one rule per key of the run identity, in its order; a change is refused, re-planned or applied") {
    const std::string base = R"(
[topology]
targets = ["cpu"]
drafters = ["cpu"]
[ring]
slots = 4
slot_tokens = 512
[target]
model = "preset:tiny"
[data]
path = "data/demo.jsonl"
)";
    // `extra`: [drafter] and [train] tables (base has neither).
    auto identity = [&](const std::string& extra) {
        const std::string text = extra.find("[drafter]") == std::string::npos ? base + "[drafter]\nnum_layers = 1\n" + extra
                                                                              : base + extra + "num_layers = 1\n";
        const hsring::Config c = hsring::parse_config(text, "t.toml");
        return hsring::run_identity(c, hsring::derive(c, hsring::preset_shape("tiny")), 1, 2);
    };
    const nlohmann::json before = identity("");
    const auto& rules = resume_rules();
    std::vector<std::string> keys, ruled;
    for (const auto& [k, v] : before.items()) keys.push_back(k);
    for (const auto& r : rules) ruled.push_back(std::string(r.key));
    std::sort(keys.begin(), keys.end());
    std::sort(ruled.begin(), ruled.end());
    CHECK(keys == ruled);  // a new identity key needs its rule (and its place in the docs' table)
    {
        const char* root = std::getenv("HSRING_SOURCE_ROOT");
        std::ifstream doc(std::string(root ? root : ".") + "/docs/operations-and-reliability.md");
        const std::string text{std::istreambuf_iterator<char>(doc), {}};
        REQUIRE(!text.empty());
        for (const auto& r : rules) {
            INFO(r.key);
            CHECK(text.find(std::string(r.key)) != std::string::npos);
        }
    }
    CHECK(check_resume(before, before).refused.empty());
    CHECK(check_resume(before, before).changes.empty());
    const auto changed = check_resume(before, identity("[train]\nlr = 0.001\ntokens_per_step = 2048\n"));
    CHECK(changed.refused.empty());
    REQUIRE(changed.changes.size() == 2);
    CHECK(changed.changes[0] == "[train] lr: 0.0006 -> 0.001: applied from the next step");
    CHECK(changed.changes[1].find("[train] tokens_per_step (slots per rank): 1 -> 4: the steps after the checkpoint are "
                                  "planned again") == 0);
    const auto refused = check_resume(before, identity("[drafter]\nblock_size = 8\nmask_token_id = 500\n"));
    REQUIRE(refused.refused.size() == 2);
    CHECK(refused.refused[0].find("[drafter] block_size was 16, now 8: the checkpoint holds this drafter") == 0);
    CHECK(refused.refused[1].find("[drafter] mask_token_id was ") == 0);
    // A key no rule names is refused; a key the previous run did not record is not compared.
    nlohmann::json odd = before;
    odd["[new] key"] = 1;
    nlohmann::json older = before;
    older.erase("[train] lr");
    CHECK(check_resume(before, odd).refused.empty());
    nlohmann::json odd_before = odd;
    odd_before["[new] key"] = 2;
    CHECK(check_resume(odd_before, odd).refused == std::vector<std::string>{"[new] key was 2, now 1: no rule says it may change"});
    CHECK(check_resume(older, identity("[train]\nlr = 0.001\n")).changes.empty());
}
