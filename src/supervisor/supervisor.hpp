#pragma once
// `hsring run`: the supervisor of one run. It owns the ring and the ledger, starts one worker
// process per [topology] entry, restarts them per [supervisor], answers the control socket and
// shows the run's status. Single-threaded: one poll() loop over a signalfd (SIGCHLD, SIGINT,
// SIGTERM), the control socket, the workers' output pipes and its timers. It links neither
// torch nor CUDA (invariant 5, docs/architecture.md).
//
// Run phases:
//   running     workers are started and restarted
//   completing  the drafter finished every epoch (exit 0, ledger done): targets get SIGTERM
//   stopping    graceful stop (hsring stop, SIGINT, SIGTERM, a worker that cannot go on): the
//               ring's stopping flag is set; targets stop claiming, the drafter drains the READY
//               slots and checkpoints; after [supervisor] stop_timeout_s the rest is killed
//   killing     hsring stop --now or a second SIGINT: SIGKILL everyone, keep ring and ledger
// When no worker is left in a phase other than running, the ring and the ledger are removed
// (unless [run] keep_ring, or after killing), run.json records the end and the supervisor exits:
//   0 complete or stopped on request, 1 a worker failed and could not be restarted (or the
//   drafters finished but the run dir does not verify: never "complete" then),
//   3 a worker reported a user error (its exit code 3), 130 interrupted twice.
// "complete" is said only after this machine's train logs verify against its checkpoint.
#include "hsring/config.hpp"
#include "supervisor/console.hpp"
#include "supervisor/reformations.hpp"
#include "supervisor/control_server.hpp"
#include "supervisor/restart_policy.hpp"
#include "supervisor/run_files.hpp"
#include "supervisor/run_memory.hpp"
#include "supervisor/signals.hpp"
#include "supervisor/status.hpp"
#include "supervisor/worker.hpp"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hsring::supervisor {

struct RunOptions {
    std::filesystem::path config;
    std::optional<std::filesystem::path> run_dir;  // overrides [run] run_dir
    bool fresh = false;                            // remove an existing ring and ledger first
    std::optional<std::string> node_rank;          // --node-rank N (overrides NODE_RANK and the file)
};

class Supervisor {
public:
    explicit Supervisor(RunOptions opts);
    ~Supervisor();
    Supervisor(const Supervisor&) = delete;
    Supervisor& operator=(const Supervisor&) = delete;

    // Runs until the end; returns the exit code. Start-up errors throw hsring::Error and leave
    // nothing behind that this call created.
    int run();

private:
    enum class Phase { Running, Completing, Stopping, Killing };
    static const char* phase_name(Phase p);

    // start (supervisor_start.cpp)
    void start();
    void load_config_and_data();
    void lock_run_dir();
    void take_over_previous();
    // Refuses settings the checkpoint cannot go on with; notes the ones that changed (resume_rules.hpp).
    void check_resume_rules();
    void open_memory();
    void write_record();
    // workers (supervisor_workers.cpp)
    void start_worker(Worker& w);
    void start_or_fail(Worker& w);
    void on_exit(Worker& w, int wait_status);
    void after_failure(Worker& w, bool failed);
    void after_decision(Worker& w, const RestartDecision& d);
    // The drafters are one gang (data parallel, c10d): they start together and, when one ends
    // before the run is complete, all of them start again together (gang restart).
    void on_drafter_exit(Worker& w, const ExitReason& reason);
    void restart_gang(Worker& cause, std::chrono::duration<double> delay, bool kill_others);
    void start_gang();
    std::vector<Worker*> drafters();
    void signal_worker(Worker& w, int sig);
    bool any_alive() const;
    void kill_and_reap();
    Worker* find_by_pid(pid_t pid);
    Worker& find_by_name(const std::string& name);
    // loop and stops (supervisor_loop.cpp)
    void loop();
    void reap();
    void on_signals();
    void tick();
    int poll_timeout_ms() const;
    void begin_stop(Phase phase, int exit_code, std::string reason);
    int finish();
    // "" when this machine's run dir verifies (train logs vs checkpoint), else why not.
    std::string verify_completion();
    std::string summary();
    // control and status (supervisor_control.cpp)
    ControlReply on_control(const nlohmann::json& request);
    nlohmann::json collect_status(bool update_rates);
    void show_status();

    RunOptions opts_;
    Console console_;
    Config cfg_;
    Derived derived_;
    RunFiles files_;
    std::uint64_t samples_ = 0, fingerprint_ = 0, tokens_per_epoch_ = 0;
    std::vector<std::uint64_t> plan_first_;  // the packer's plan of this machine's share
    std::uint64_t eval_samples_ = 0, eval_fingerprint_ = 0;  // [data] eval_path (the whole set)
    std::optional<RunMemory> mem_;
    std::optional<RunRecord> previous_;
    std::optional<Reformations> reformations_;  // metrics.jsonl's resume rows, for status
    RunRecord record_;
    std::vector<std::unique_ptr<Worker>> workers_;
    std::unique_ptr<SignalEvents> signals_;
    std::unique_ptr<ControlServer> control_;
    std::optional<RestartPolicy> policy_;
    RateMeter rates_;
    bool made_run_dir_ = false;  // this start made files_.dir (removed if it fails before run.json)
    int lock_fd_ = -1;
    Phase phase_ = Phase::Running;
    int exit_code_ = 0;
    bool complete_ = false;  // the run ended complete and its run dir verified
    std::string end_reason_;
    Clock::time_point start_time_{}, next_status_{}, stop_deadline_{};
    int sigints_ = 0;
    std::uint32_t incarnation_base_ = 0;
    std::uint32_t gang_generation_ = 0;            // gang starts in this supervisor (HSRING_GANG)
    std::optional<Clock::time_point> gang_start_at_;  // a gang restart is due once no drafter is left
};

} // namespace hsring::supervisor
