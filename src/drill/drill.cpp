// `hsring drill` (see drill.hpp).
#include "drill/drill.hpp"

#include "hsring/config.hpp"
#include "hsring/config_rewrite.hpp"
#include "hsring/error.hpp"
#include "hsring/free_port.hpp"
#include "hsring/liveness.hpp"
#include "hsring/ring.hpp"
#include "hsring/safe_file.hpp"
#include "hsring/worker_contract.hpp"
#include "supervisor/control_client.hpp"
#include "supervisor/run_files.hpp"
#include "supervisor/run_verify.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace hsring::drill {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// This very program, also when its file was replaced meanwhile (a rebuild during a long drill).
fs::path self_exe() {
    if (::access("/proc/self/exe", X_OK) != 0) fail("cannot find the hsring program (/proc/self/exe): {}", errno_text(errno));
    return "/proc/self/exe";
}

// The first `n` non-blank lines of `from` (0: all) into `to`; returns how many.
std::uint64_t copy_samples(const fs::path& from, const fs::path& to, std::uint64_t n) {
    std::ifstream in(from);
    if (!in) fail("cannot read the data set {}", from.string());
    std::ofstream out(to);
    std::string line;
    std::uint64_t copied = 0;
    while ((n == 0 || copied < n) && std::getline(in, line)) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        out << line << '\n';
        ++copied;
    }
    if (!out.flush()) fail("cannot write {}", to.string());
    return copied;
}

struct Tally {
    std::uint64_t kill_worker = 0, stop_worker = 0, restart_worker = 0, kill_supervisor = 0, stop_supervisor = 0;
    std::map<std::string, std::uint64_t> injected;  // by point
    std::vector<std::uint32_t> drafter_counts;       // --resize: the drafter ranks of each supervisor start
    std::uint64_t injected_total() const {
        std::uint64_t n = 0;
        for (const auto& [p, k] : injected) n += k;
        return n;
    }
    std::uint64_t total() const {
        return kill_worker + stop_worker + restart_worker + kill_supervisor + stop_supervisor + injected_total();
    }
    void add(const Tally& o) {
        kill_worker += o.kill_worker;
        stop_worker += o.stop_worker;
        restart_worker += o.restart_worker;
        kill_supervisor += o.kill_supervisor;
        stop_supervisor += o.stop_supervisor;
        drafter_counts.insert(drafter_counts.end(), o.drafter_counts.begin(), o.drafter_counts.end());
        for (const auto& [p, k] : o.injected) injected[p] += k;
    }
    std::string str() const {
        std::string inj;
        for (const auto& [p, k] : injected) inj += fmt::format("{}{} {}", inj.empty() ? "" : ", ", p, k);
        return fmt::format("{} SIGKILL of a worker, {} SIGSTOP of a worker, {} graceful worker restarts, {} SIGKILL of "
                           "the supervisor, {} SIGSTOP of the supervisor, {} injected{}", kill_worker, stop_worker,
                           restart_worker, kill_supervisor, stop_supervisor, injected_total(),
                           inj.empty() ? "" : " (" + inj + ")") +
               (drafter_counts.empty() ? std::string()
                                       : fmt::format("; drafter ranks per supervisor start {}", fmt::join(drafter_counts, " ")));
    }
};

struct RunResult {
    bool ok = false;
    bool weights_equal = false;  // its export is the unkilled run's, byte for byte
    std::string weights_note;    // on a GPU: how it differs (reported, not a failure)
    std::string why;
    Tally tally;
    std::uint64_t passes = 0, lost = 0, doubled = 0;
    double seconds = 0;
};

struct Suspended {
    pid_t pid;
    std::uint64_t ticks;
    Clock::time_point resume_at;
};

class Drill {
public:
    explicit Drill(const DrillOptions& o) : o_(o), rng_(o.seed), exe_(self_exe()) {}
    int run();

private:
    void prepare();
    void write_config(std::uint32_t index);
    // --resize: a new drafter count for the next supervisor start, written into the config.
    void resize(std::uint32_t index, Tally& t);
    RunResult run_one(std::uint32_t index, std::uint64_t budget);
    fs::path export_dir(std::uint32_t index) const { return work_ / fmt::format("run-{}", index) / "drafter"; }
    // Run 0: the same config without a single fault, whose export every drilled run must equal
    // (invariant 10, docs/architecture.md: training is a function of config, data and seed).
    void run_reference();
    std::string compare_with_reference(std::uint32_t index) const;
    std::string plan_faults();
    pid_t start_supervisor(const fs::path& run_dir, const fs::path& log, const std::string& faults);
    std::optional<json> status(const fs::path& run_dir);
    bool act(const fs::path& run_dir, pid_t supervisor, std::uint64_t supervisor_ticks, Tally& t, bool& killed_supervisor);
    void resume_due(bool all);
    void count_injected(const fs::path& log, std::uint64_t& offset, Tally& t);
    double uniform(double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng_); }
    std::uint64_t pick(std::uint64_t n) { return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng_); }

    DrillOptions o_;
    std::mt19937_64 rng_;
    fs::path exe_, work_, config_file_;
    std::uint32_t targets_ = 0, drafters_ = 0;
    bool gpu_ = false;  // some worker is on a GPU: exports may differ in the last bits
    std::vector<Suspended> suspended_;
    Clock::time_point last_supervisor_kill_{};
    std::vector<ConfigSetting> settings_;  // the drill's keys, set on the user's config
    bool user_ring_name_ = false;
    std::string ring_name_;  // the current run's
};

// The drill's config for run `index`: its own run (and ring) name and a free rendezvous port.
void Drill::write_config(std::uint32_t index) {
    std::vector<ConfigSetting> set = settings_;
    const std::string name = fmt::format("drill{}r{}", ::getpid(), index);
    ring_name_ = "hsring-" + name;
    set.push_back({"run", "name", name});
    if (user_ring_name_) set.push_back({"ring", "name", "hsring-" + name});
    set.push_back({"distributed", "master_port", std::int64_t{free_loopback_port()}});
    set.push_back({"drafter", "export_dir", export_dir(index).string()});
    if (o_.resize) set.push_back({"topology", "drafters", std::vector<std::string>(drafters_, "cpu")});
    safe::write_atomic(work_, config_file_.filename().string(), rewrite_config(o_.config, set), false);
}

void Drill::resize(std::uint32_t index, Tally& t) {
    if (!o_.resize) return;
    drafters_ = 1 + (drafters_ + static_cast<std::uint32_t>(pick(2))) % 3;  // another of 1..3 than now
    t.drafter_counts.push_back(drafters_);
    write_config(index);
}

void Drill::prepare() {
    const Config user = load_config(o_.config);
    if (user.distributed.nnodes > 1)
        fail("{}: [distributed] nnodes = {}: hsring drill runs one machine (each machine of a run can drill on its own "
             "with nnodes = 1)", o_.config.string(), user.distributed.nnodes);
    targets_ = static_cast<std::uint32_t>(user.topology.targets.size());
    drafters_ = static_cast<std::uint32_t>(user.topology.drafters.size());
    for (const auto& p : user.topology.drafters) gpu_ = gpu_ || (o_.train && !p.is_cpu());
    if (o_.resize && o_.train)
        fail("--resize runs synthetic drafter ranks on the CPU (1 to 3 of them); it cannot be combined with --mode train");
    // --resize: the reference run has the config's count (at most 3), drilled runs 1..3 at random.
    if (o_.resize) drafters_ = std::clamp<std::uint32_t>(drafters_, 1, 3);
    if (o_.work_dir) {
        work_ = fs::absolute(*o_.work_dir);
    } else {
        const char* tmp = std::getenv("TMPDIR");
        work_ = fs::path(tmp && *tmp ? tmp : "/tmp") / fmt::format("hsring-drill-{}", ::getpid());
    }
    safe::make_private_dir(work_);
    const fs::path data = work_ / "data.jsonl";
    const std::uint64_t n = copy_samples(user.resolve(user.data.path), data, o_.samples);
    if (n == 0) fail("the data set {} holds no sample", user.resolve(user.data.path).string());
    config_file_ = work_ / "drill.toml";
    std::vector<ConfigSetting> set = {
        {"run", "mode", std::string(o_.train ? "train" : "synthetic")},
        {"run", "keep_ring", false},
        {"data", "path", data.string()},
        {"data", "epochs", std::int64_t{std::min<std::uint32_t>(user.data.epochs, 2)}},
        {"train", "max_steps", std::int64_t{0}},
        {"supervisor", "restart", std::string("on-failure")},
        {"supervisor", "max_restarts", std::int64_t{1000000}},
        {"supervisor", "backoff_initial_s", 0.05},
        {"supervisor", "backoff_max_s", 0.2},
        {"supervisor", "stop_timeout_s", 20.0},
        {"supervisor", "status_interval_s", 1.0},
        {"distributed", "timeout_s", 60.0},
    };
    // Checkpoints often enough for faults to meet them (they are cheap without models).
    if (!o_.train && user.train.checkpoint_every > 5) set.push_back({"train", "checkpoint_every", std::int64_t{5}});
    // --resize: one global step of 6 slots, which 1, 2 and 3 ranks share evenly: the same steps
    // train the same slots at any count, so every run must still end with run 0's export.
    if (o_.resize)
        set.push_back({"train", "tokens_per_step", static_cast<std::int64_t>(6 * user.ring.slot_tokens)});
    settings_ = std::move(set);
    user_ring_name_ = !user.ring.name.empty();
    write_config(0);
    load_config(config_file_);  // the copy is valid
    fmt::print("drill: {} ({} targets, {} drafter ranks, {} samples x {} epochs, {} mode) in {}\n", o_.config.string(),
               targets_, drafters_, n, std::min<std::uint32_t>(user.data.epochs, 2), o_.train ? "train" : "synthetic",
               work_.string());
    std::fflush(stdout);
}

// HSRING_FAULT for one supervisor: most workers get one fault at a random pass of one of their
// points (src/worker/CONTRACT.md); the supervisor hands it to their first process only.
std::string Drill::plan_faults() {
    std::string spec;
    auto add = [&](const std::string& who, const char* point, std::uint64_t lo, std::uint64_t hi) {
        const std::uint64_t n = lo + pick(hi - lo + 1);
        spec += fmt::format("{}{}:{}:{}:{}", spec.empty() ? "" : ",", who, point, n, pick(10) < 6 ? "throw" : "kill");
    };
    // One target always gets a fault at one of its first writes: with a worker SIGKILLed every
    // ~0.5 s (the test's --gap-ms 150, five processes) a fault at a late pass mostly never fires,
    // and a drill of four runs once dealt no injected fault at all.
    const std::uint32_t early = targets_ ? static_cast<std::uint32_t>(pick(targets_)) : 0;
    for (std::uint32_t i = 0; i < targets_; ++i) {
        if (i == early) add(fmt::format("target.{}", i), "write", 1, 6);
        else if (pick(10) < 7) add(fmt::format("target.{}", i), "write", 2, 30);
    }
    // done: after the run is marked done, before the drafter exits (its restart must see the run
    // complete and exit at once; it once began a final evaluation with the targets gone and hung).
    static const char* kPoints[] = {"stage", "train", "checkpoint", "commit", "done"};
    for (std::uint32_t i = 0; i < drafters_; ++i) {
        if (pick(10) >= 7) continue;
        const char* p = kPoints[pick(5)];
        if (std::string(p) == "done") {
            spec += fmt::format("{}drafter.{}:done:1:kill", spec.empty() ? "" : ",", i);
            continue;
        }
        const bool rare = std::string(p) == "checkpoint" || std::string(p) == "commit";
        add(fmt::format("drafter.{}", i), p, rare ? 1 : 2, rare ? 3 : 30);
    }
    return spec;
}

pid_t Drill::start_supervisor(const fs::path& run_dir, const fs::path& log, const std::string& faults) {
    const std::string cfg = config_file_.string(), dir = run_dir.string(), exe = exe_.string();
    const std::string steps = fmt::format("{}", o_.step_ms);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) fail("fork: {}", errno_text(errno));
    if (pid == 0) {
        // A drill that dies stops its run gracefully.
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent) ::_exit(1);
        const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
        const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || null < 0) ::_exit(127);
        ::dup2(null, 0);
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        // One machine, whatever the launcher said.
        for (const char* k : {launcher_env::kMasterAddr, launcher_env::kMasterPort, launcher_env::kNnodes,
                              launcher_env::kNodeRank})
            ::unsetenv(k);
        ::setenv(env::kFault, faults.c_str(), 1);
        ::setenv("HSRING_SYNTH_STEP_MS", steps.c_str(), 1);
        ::execl(exe.c_str(), "hsring", "run", cfg.c_str(), "--run-dir", dir.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    return pid;
}

std::optional<json> Drill::status(const fs::path& run_dir) {
    try {
        supervisor::ControlClient c(run_dir);
        json r = c.request({{"cmd", "status"}}, 800ms);
        if (r.contains("status")) return r["status"];
    } catch (const std::exception&) {
        // not started yet, suspended, restarting: no status now
    }
    return std::nullopt;
}

void Drill::resume_due(bool all) {
    const auto now = Clock::now();
    std::erase_if(suspended_, [&](const Suspended& s) {
        if (!all && now < s.resume_at) return false;
        signal_process(s.pid, s.ticks, SIGCONT);
        return true;
    });
}

// One random fault: returns false when none could be dealt now (nothing eligible).
bool Drill::act(const fs::path& run_dir, pid_t supervisor, std::uint64_t supervisor_ticks, Tally& t,
                bool& killed_supervisor) {
    std::uint64_t dice = pick(100);
    // A new supervisor first waits for its predecessor's workers and starts a gang: give it a few
    // seconds before it is killed again, or the drill would mostly kill supervisors.
    // --resize: a supervisor SIGKILL is where the drafter count changes; three times as often.
    const std::uint64_t kill_from = o_.resize ? 85 : 95;
    if (dice >= kill_from && seconds_since(last_supervisor_kill_) < 5) dice = pick(kill_from - 5);
    if (dice >= kill_from - 5) {  // the supervisor: SIGKILL (it is started again) or SIGSTOP for a moment
        resume_due(true);  // its workers must be able to finish when it dies
        if (dice >= kill_from) {
            ::kill(supervisor, SIGKILL);
            ++t.kill_supervisor;
            killed_supervisor = true;
            last_supervisor_kill_ = Clock::now();
        } else if (signal_process(supervisor, supervisor_ticks, SIGSTOP)) {
            suspended_.push_back({supervisor, supervisor_ticks, Clock::now() + std::chrono::milliseconds(100 + pick(500))});
            ++t.stop_supervisor;
        }
        return true;
    }
    // A worker: only once every drafter is past its start (a gang's first rendezvous is no place
    // for a drill: there a dead peer is a configuration error), and one that is up.
    const auto st = status(run_dir);
    if (!st || (*st)["run"].value("phase", "") != "running") return false;
    std::vector<std::string> up;
    bool gang_up = true;
    for (const auto& w : (*st)["workers"]) {
        const bool running = w.value("state", "") == "running";
        if (w.value("role", "") == "drafter" && !running) gang_up = false;
        if (running) up.push_back(w.value("name", ""));
    }
    if (!gang_up) std::erase_if(up, [](const std::string& n) { return n.rfind("drafter.", 0) == 0; });
    if (up.empty()) return false;
    const std::string victim = up[pick(up.size())];
    const supervisor::RunRecord rec = supervisor::read_run_record(supervisor::RunFiles{run_dir}.run_json());
    const auto it = std::find_if(rec.workers.begin(), rec.workers.end(), [&](const auto& w) { return w.name == victim; });
    if (it == rec.workers.end()) return false;
    if (dice < 45) {
        if (!signal_process(it->pid, it->start_ticks, SIGKILL)) return false;
        ++t.kill_worker;
    } else if (dice < 75) {
        if (!signal_process(it->pid, it->start_ticks, SIGSTOP)) return false;
        suspended_.push_back({it->pid, it->start_ticks, Clock::now() + std::chrono::milliseconds(100 + pick(700))});
        ++t.stop_worker;
    } else {
        try {
            supervisor::ControlClient(run_dir).request({{"cmd", "restart"}, {"worker", victim}}, 2s);
        } catch (const std::exception&) {
            return false;
        }
        ++t.restart_worker;
    }
    return true;
}

// Counts the injected faults the run's log reports since `offset` ("W HSRING_FAULT <spec>: ...
// at pass N of point 'P'").
void Drill::count_injected(const fs::path& log, std::uint64_t& offset, Tally& t) {
    std::ifstream in(log);
    in.seekg(static_cast<std::streamoff>(offset));
    std::string line;
    while (std::getline(in, line)) {
        if (in.eof()) break;  // a line still being written: read it next time
        offset += line.size() + 1;
        const auto at = line.find(" W HSRING_FAULT ");
        const auto p = line.find("of point '");
        if (at == std::string::npos || p == std::string::npos) continue;
        const auto q = line.find('\'', p + 10);
        ++t.injected[line.substr(p + 10, q - p - 10)];
    }
}

RunResult Drill::run_one(std::uint32_t index, std::uint64_t budget) {
    RunResult res;
    const fs::path run_dir = work_ / fmt::format("run-{}", index);
    const fs::path log = work_ / fmt::format("run-{}.log", index);
    write_config(index);
    resize(index, res.tally);
    const auto t0 = Clock::now();
    std::uint64_t log_offset = 0;
    pid_t sup = start_supervisor(run_dir, log, plan_faults());
    std::uint64_t sup_ticks = 0;
    auto last_progress = Clock::now();
    std::uint64_t last_trained = 0;
    auto next_fault = Clock::now() + 500ms;  // let it start
    auto next_status = Clock::now();
    auto fail_with = [&](std::string why) {
        resume_due(true);
        if (sup > 0) {
            // Stop it at once (a second SIGINT): its workers are killed, its ring stays for a look.
            ::kill(sup, SIGINT);
            std::this_thread::sleep_for(100ms);
            ::kill(sup, SIGINT);
            int ws = 0;
            for (int i = 0; i < 300 && ::waitpid(sup, &ws, WNOHANG) == 0; ++i) std::this_thread::sleep_for(100ms);
            if (::waitpid(sup, &ws, WNOHANG) == 0) {
                ::kill(sup, SIGKILL);
                ::waitpid(sup, nullptr, 0);
            }
        }
        res.why = std::move(why);
        if (Ring::exists(ring_name_))
            res.why += fmt::format(" (its ring stays for a look: hsring ring rm {} removes it)", ring_name_);
        res.seconds = seconds_since(t0);
        return res;
    };
    for (;;) {
        if (!sup_ticks) sup_ticks = process_start_ticks(sup);
        int ws = 0;
        const pid_t r = ::waitpid(sup, &ws, WNOHANG);
        count_injected(log, log_offset, res.tally);
        if (r == sup) {
            if (WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL) {  // ours: the next supervisor takes over
                resize(index, res.tally);  // --resize: with another number of drafter ranks
                sup = start_supervisor(run_dir, log, plan_faults());
                sup_ticks = 0;
                next_fault = Clock::now() + 1s;
                continue;
            }
            sup = 0;
            const std::string text = safe::read_file(log).value_or("");
            if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0 || text.find("complete (verified)") == std::string::npos)
                return fail_with(fmt::format("run {} ended without completing ({}); see {}", index,
                                             WIFEXITED(ws) ? fmt::format("exit code {}", WEXITSTATUS(ws)) : "killed",
                                             log.string()));
            break;
        }
        resume_due(false);
        const auto now = Clock::now();
        if (now >= next_status) {
            next_status = now + 500ms;
            if (auto st = status(run_dir)) {
                const json& l = (*st)["ledger"];
                const std::uint64_t trained = l.value("consumed", std::uint64_t{0}) + l.value("durable", std::uint64_t{0});
                if (trained != last_trained) {
                    last_trained = trained;
                    last_progress = now;
                }
            }
        }
        if (suspended_.empty() && seconds_since(last_progress) > o_.stall_s)
            return fail_with(fmt::format("run {} made no progress for {:g} s (a hang); see {} and {}", index, o_.stall_s,
                                         log.string(), (run_dir / "logs").string()));
        if (seconds_since(t0) > o_.timeout_s)
            return fail_with(fmt::format("run {} did not end within {:g} s (--timeout); see {}", index, o_.timeout_s,
                                         log.string()));
        if (res.tally.total() < budget && now >= next_fault) {
            bool killed = false;
            act(run_dir, sup, sup_ticks, res.tally, killed);
            next_fault = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double, std::milli>(uniform(0.2, 1.8) * o_.gap_ms));
            if (killed) continue;
        }
        if (res.tally.total() >= budget) resume_due(true);
        std::this_thread::sleep_for(20ms);
    }
    resume_due(true);
    res.seconds = seconds_since(t0);
    // The run dir, as `hsring ledger verify` sees it.
    const supervisor::RunVerification v = supervisor::verify_run_dirs({run_dir});
    for (const auto& e : v.report.epochs) res.passes += e.total;
    res.lost = v.report.missing();
    res.doubled = v.report.doubled();
    res.ok = v.report.ok();
    if (!res.ok) {
        res.why = fmt::format("run {}: {} sample passes lost, {} doubled (hsring ledger verify {})", index, res.lost,
                              res.doubled, run_dir.string());
        return res;
    }
    if (index > 0) {
        // The ledger replays the drafter's own train log: a wrong update would pass it. The weights
        // themselves must be the unkilled run's.
        const std::string diff = compare_with_reference(index);
        res.weights_equal = diff.empty();
        if (!diff.empty() && !gpu_) {
            res.ok = false;
            res.why = fmt::format("run {}: its export differs from the unkilled run's: {}", index, diff);
        } else if (!diff.empty()) {
            res.weights_note = diff;
        }
    }
    return res;
}

void Drill::run_reference() {
    const fs::path log = work_ / "run-0.log";
    write_config(0);
    const pid_t sup = start_supervisor(work_ / "run-0", log, "");
    int ws = 0;
    const auto t0 = Clock::now();
    while (::waitpid(sup, &ws, WNOHANG) == 0) {
        if (seconds_since(t0) > o_.timeout_s) {
            ::kill(sup, SIGKILL);
            ::waitpid(sup, &ws, 0);
            fail("the drill's unkilled reference run did not end within {:g} s (--timeout); see {}", o_.timeout_s,
                 log.string());
        }
        std::this_thread::sleep_for(50ms);
    }
    const std::string text = safe::read_file(log).value_or("");
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0 || text.find("complete (verified)") == std::string::npos)
        fail("the drill's unkilled reference run did not complete; see {}", log.string());
    fmt::print("run 0: no faults in {:.1f} s: the reference export ({})\n", seconds_since(t0), export_dir(0).string());
    std::fflush(stdout);
}

// "" when every file of run `index`'s export equals the reference's, byte for byte; else which.
std::string Drill::compare_with_reference(std::uint32_t index) const {
    const fs::path ref = export_dir(0), got = export_dir(index);
    std::string diff;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(ref, ec)) {
        if (!e.is_regular_file()) continue;
        const auto a = safe::read_file(e.path());
        const auto b = safe::read_file(got / e.path().filename());
        if (!b) diff += fmt::format("{}{} is missing", diff.empty() ? "" : "; ", (got / e.path().filename()).string());
        else if (a != b) diff += fmt::format("{}{} differs", diff.empty() ? "" : "; ", e.path().filename().string());
    }
    if (ec) diff = fmt::format("cannot read {}: {}", ref.string(), ec.message());
    return diff;
}

int Drill::run() {
    prepare();
    const auto t0 = Clock::now();
    run_reference();
    std::uint32_t equal = 0;
    Tally all;
    std::uint64_t passes = 0, lost = 0, doubled = 0;
    std::uint32_t runs = 0;
    // A few runs: each takes a share of the faults, then runs to its end and is verified.
    const std::uint64_t per_run = std::max<std::uint64_t>(10, (o_.faults + 2) / 3);
    std::string failure;
    while (all.total() < o_.faults && failure.empty()) {
        ++runs;
        const RunResult r = run_one(runs, std::min<std::uint64_t>(per_run, o_.faults - all.total()));
        all.add(r.tally);
        passes += r.passes;
        lost += r.lost;
        doubled += r.doubled;
        equal += r.weights_equal ? 1 : 0;
        fmt::print("run {}: {} faults in {:.1f} s ({}): {}\n", runs, r.tally.total(), r.seconds, r.tally.str(),
                   r.ok ? fmt::format("complete (verified), {} sample passes exactly once, export {}", r.passes,
                                      r.weights_equal ? "equal to the unkilled run's"
                                                      : "differs from the unkilled run's (GPU): " + r.weights_note)
                        : "FAILED: " + r.why);
        std::fflush(stdout);
        if (!r.ok) failure = r.why;
        if (runs >= 100 && all.total() < o_.faults) failure = "100 runs dealt too few faults: is the data set tiny?";
    }
    const double secs = seconds_since(t0);
    fmt::print("drill: {} faults {} in {} runs, {:.1f} s: {}\n", all.total(), failure.empty() ? "survived" : "dealt", runs,
               secs, all.str());
    fmt::print("samples: {} passes verified, {} lost, {} doubled; exports equal to the unkilled run's: {} of {}\n",
               passes, lost, doubled, equal, runs);
    if (!failure.empty()) {
        fmt::print("FAILED: {}\n(the drill's files stay in {})\n", failure, work_.string());
        return 1;
    }
    fmt::print("ok: every run completed, verified exactly once{}\n",
               equal == runs ? " and ended with the unkilled run's weights" : "");
    if (o_.keep) fmt::print("(files kept in {})\n", work_.string());
    else fs::remove_all(work_);
    return 0;
}

} // namespace

int run_drill(const DrillOptions& options) { return Drill(options).run(); }

} // namespace hsring::drill
