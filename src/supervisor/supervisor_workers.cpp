// Starting workers, and what happens when one ends (see supervisor.hpp, restart_policy.hpp and
// src/worker/CONTRACT.md).
#include "supervisor/supervisor.hpp"

#include "hsring/error.hpp"
#include "supervisor/spawn.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>

namespace hsring::supervisor {

void Supervisor::start_worker(Worker& w) {
    const WorkerSpec& s = w.spec;

    const std::uint32_t incarnation = incarnation_base_ + w.starts + 1;
    SpawnSpec spec;
    spec.program = w.program;
    spec.argv.push_back(s.program);
    spec.argv.insert(spec.argv.end(), s.role_args.begin(), s.role_args.end());
    spec.argv.insert(spec.argv.end(), {"--config", record_.config, "--run-dir", files_.dir.string()});
    const DistributedConfig& dist = cfg_.distributed;
    spec.env = {
        {env::kWorkerName, s.name},
        {env::kRole, to_string(s.role)},
        {env::kRank, std::to_string(s.rank)},
        {env::kIncarnation, std::to_string(incarnation)},
        {env::kRing, derived_.ring_name},
        {env::kLedger, record_.ledger},
        {env::kCudaVisibleDevices, s.place.is_cpu() ? "" : std::to_string(s.place.gpu)},
        {env::kDevice, s.place.is_cpu() ? "cpu" : "cuda"},
        {env::kSupervisorPid, std::to_string(::getpid())},
        // Every worker knows its machine's place (targets take this machine's share of the data).
        {env::kNodeRank, std::to_string(dist.node_rank)},
        {env::kNnodes, std::to_string(dist.nnodes)},
        {env::kLocalWorld, std::to_string(cfg_.topology.drafters.size())},
        {env::kMasterAddr, dist.master_addr},
        {env::kMasterPort, std::to_string(dist.master_port)},
        {env::kDistTimeout, fmt::format("{}", dist.timeout_s)},
        {env::kGangGeneration, std::to_string(gang_generation_)},
    };
    // c10d logs a lost peer as a warning with a C++ stack trace; the workers say what happened in
    // one line of their own. Users who want c10d's own logs set TORCH_CPP_LOG_LEVEL themselves.
    if (!std::getenv("TORCH_CPP_LOG_LEVEL")) spec.env.push_back({"TORCH_CPP_LOG_LEVEL", "ERROR"});
    // HSRING_FAULT reaches the first process of each worker only: a restarted one runs without
    // it, so an injected fault fires once instead of looping (src/worker/CONTRACT.md).
    if (w.starts > 0) spec.env.push_back({env::kFault, ""});

    w.output.open_log(files_.worker_log(s.name));
    // Stale numbers of an earlier process must not show as this one's.
    mem_->status.clear_stats(s.stats_index);
    const Spawned p = spawn(spec);
    w.output.attach(p.out_fd, p.err_fd);
    if (w.starts > 0) ++w.restarts;
    ++w.starts;
    w.pid = p.pid;
    w.last_pid = p.pid;
    w.incarnation = incarnation;
    w.state = WorkerState::Starting;
    w.started = Clock::now();
    w.kill_at.reset();
    w.restart_requested = false;
    w.output.note(fmt::format("{} started: pid {}, incarnation {}, {} ({})", s.name, p.pid, incarnation,
                              s.place.str(), iso_time_now()));

    WorkerRecord rec{s.name, p.pid, incarnation, process_start_ticks(p.pid)};
    auto it = std::find_if(record_.workers.begin(), record_.workers.end(), [&](const auto& r) { return r.name == s.name; });
    if (it == record_.workers.end()) record_.workers.push_back(rec);
    else *it = rec;
    write_record();
    console_.info("started {} (pid {}, incarnation {}, {}){}", s.name, p.pid, incarnation, s.place.str(),
                  w.restarts ? fmt::format(", restart {}", w.restarts) : "");
}

void Supervisor::start_or_fail(Worker& w) {
    try {
        start_worker(w);
    } catch (const Error& e) {
        // The program vanished, fork failed, the log cannot be opened: like a crash, it counts
        // towards the cap.
        console_.error("cannot start {}: {}", w.spec.name, e.what());
        w.last_exit = ExitReason{127, 0, false};
        w.pid = 0;
        if (w.spec.role == WorkerRole::Drafter) on_drafter_exit(w, *w.last_exit);
        else after_failure(w, true);
    }
}

void Supervisor::on_exit(Worker& w, int wait_status) {
    const ExitReason reason = ExitReason::from_wait_status(wait_status);
    const pid_t pid = w.pid;
    w.output.drain(w.spec.name, console_);
    w.pid = 0;
    w.last_exit = reason;
    w.kill_at.reset();

    // Undo what it held: WRITING slots -> FREE with their samples re-issued, READING -> READY.
    console_.hide();  // the ring logs what it reclaims on stderr
    const ReclaimResult r = mem_->ring.reclaim({pid, w.incarnation}, mem_->repend());
    console_.redraw();
    const std::string slots = r.empty() ? "" : fmt::format("; reclaimed {} WRITING and {} READING slots",
                                                           r.writing_freed.size(), r.reading_returned.size());
    w.output.note(fmt::format("{} (pid {}) ended: {}{}", w.spec.name, pid, reason.str(), slots));
    if (reason.failed()) console_.warn("{} (pid {}) ended: {}{}", w.spec.name, pid, reason.str(), slots);
    else console_.info("{} (pid {}) ended: {}{}", w.spec.name, pid, reason.str(), slots);

    if (phase_ != Phase::Running) {
        w.state = WorkerState::Stopped;
        return;
    }
    if (reason.code == exit_code::kDiverged) {
        // Training diverged (non-finite steps in a row, or a non-finite state): a restart would
        // resume the same checkpoint on the same data and diverge again. `hsring run` exits 4.
        constexpr int kDivergedRunExit = 4;
        w.state = WorkerState::Failed;
        const std::string line =
            last_error_message(files_.worker_log(w.spec.name), w.spec.name, w.output.last_stderr_line());
        begin_stop(Phase::Stopping, kDivergedRunExit,
                   fmt::format("{} stopped the run: {}", w.spec.name,
                               line.empty() ? "training diverged (see " + files_.worker_log(w.spec.name).string() + ")"
                                            : line));
        return;
    }
    if (w.spec.role == WorkerRole::Drafter && !reason.fatal()) {
        on_drafter_exit(w, reason);
        return;
    }
    if (w.restart_requested) {  // hsring restart: at once, whatever the policy says
        start_or_fail(w);
        return;
    }
    if (reason.fatal()) {
        w.state = WorkerState::Failed;
        const std::string line =
            last_error_message(files_.worker_log(w.spec.name), w.spec.name, w.output.last_stderr_line());
        begin_stop(Phase::Stopping, kFatalExitCode,
                   fmt::format("{} stopped the run with a user error (exit code 3): {}", w.spec.name,
                               line.empty() ? "(it printed no message; see " + files_.worker_log(w.spec.name).string() + ")" : line));
        return;
    }
    // Exiting cleanly once the run is done (or stopping) is what a target does: not a restart case.
    if (!reason.failed() && (mem_->ledger.done() || mem_->ring.stopping())) {
        w.state = WorkerState::Exited;
        return;
    }
    after_failure(w, reason.failed());
}

void Supervisor::after_failure(Worker& w, bool failed) { after_decision(w, policy_->decide(failed, w.history, Clock::now())); }

void Supervisor::after_decision(Worker& w, const RestartDecision& d) {
    const std::string log = files_.worker_log(w.spec.name).string();
    const std::string exit = w.last_exit ? w.last_exit->str() : "?";
    switch (d.kind) {
    case RestartDecision::Restart:
        w.state = WorkerState::Restarting;
        w.next_start = Clock::now() + std::chrono::duration_cast<Clock::duration>(d.delay);
        console_.info("restarting {} in {:.1f} s (restart {} of at most {} within {:g} s)", w.spec.name, d.delay.count(),
                      w.history.recent(Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                                          std::chrono::duration<double>(cfg_.supervisor.restart_window_s))),
                      cfg_.supervisor.max_restarts, cfg_.supervisor.restart_window_s);
        return;
    case RestartDecision::GiveUp: {
        w.state = WorkerState::Failed;
        const std::string line =
            last_error_message(files_.worker_log(w.spec.name), w.spec.name, w.output.last_stderr_line());
        begin_stop(Phase::Stopping, 1,
                   fmt::format("{} is not restarted: {}. Its last exit: {}{}. Its log: {}", w.spec.name, d.why, exit,
                               line.empty() ? "" : fmt::format(" (last error line: {})", line), log));
        return;
    }
    case RestartDecision::NoRestart:
        w.state = WorkerState::Exited;
        break;
    }
    // A clean exit that is not restarted: can the run still finish?
    if (w.spec.role == WorkerRole::Drafter) {
        begin_stop(Phase::Stopping, 1,
                   fmt::format("{} exited ({}) before every epoch was trained; [supervisor] restart = \"{}\" does not "
                               "restart a clean exit. Its log: {}", w.spec.name, exit, hsring::to_string(cfg_.supervisor.restart), log));
        return;
    }
    const bool target_left = std::any_of(workers_.begin(), workers_.end(), [](const auto& o) {
        return o->spec.role == WorkerRole::Target && (o->alive() || o->state == WorkerState::Restarting);
    });
    if (!target_left)
        begin_stop(Phase::Stopping, 1,
                   fmt::format("every target has exited but the run is not complete (the last: {}, {}). Its log: {}",
                               w.spec.name, exit, log));
}

std::vector<Worker*> Supervisor::drafters() {
    std::vector<Worker*> out;
    for (auto& w : workers_)
        if (w->spec.role == WorkerRole::Drafter) out.push_back(w.get());
    return out;
}

void Supervisor::start_gang() {
    ++gang_generation_;
    gang_start_at_.reset();
    for (Worker* d : drafters()) start_or_fail(*d);
}

void Supervisor::on_drafter_exit(Worker& w, const ExitReason& reason) {
    const auto gang = drafters();
    if (gang_start_at_) {
        // A gang restart is under way: this one was stopped with the others.
        w.state = WorkerState::Restarting;
        return;
    }
    if (reason.code == exit_code::kOk && mem_->ledger.done()) {
        w.state = WorkerState::Exited;
        if (std::all_of(gang.begin(), gang.end(), [](const Worker* d) { return d->state == WorkerState::Exited; }))
            begin_stop(Phase::Completing, 0, "complete");
        return;
    }
    if (reason.code == exit_code::kGangStopped) {
        w.state = WorkerState::Exited;
        begin_stop(Phase::Stopping, 0, fmt::format("{} stopped: another machine of the run stops it, so this one stops too",
                                                   w.spec.name));
        return;
    }
    if (reason.code == exit_code::kGangRestart || w.restart_requested) {
        // A peer rank (or this one, on request) stopped the gang at a checkpoint: everyone starts
        // again at once, nobody failed.
        restart_gang(w, std::chrono::duration<double>(0), false);
        return;
    }
    // A failure, or a clean exit before the run is complete: the restart policy decides, and
    // counts it against this worker.
    const RestartDecision d = policy_->decide(reason.failed(), w.history, Clock::now());
    if (d.kind != RestartDecision::Restart) {
        after_decision(w, d);  // gives up, or a clean exit that is not restarted: the run stops
        return;
    }
    console_.info("restarting the drafter gang ({}) in {:.1f} s: {} ended ({}); restart {} of at most {} within {:g} s",
                  gang.size() == 1 ? w.spec.name : fmt::format("{} ranks", gang.size()), d.delay.count(), w.spec.name,
                  reason.str(), w.history.recent(Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(cfg_.supervisor.restart_window_s))),
                  cfg_.supervisor.max_restarts, cfg_.supervisor.restart_window_s);
    // The others are stuck in a collective with a dead peer: kill them rather than wait for the
    // timeout. Their consumed samples go back with the gang's resume (exactly once).
    restart_gang(w, d.delay, true);
}

void Supervisor::restart_gang(Worker& cause, std::chrono::duration<double> delay, bool kill_others) {
    gang_start_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(delay);
    for (Worker* d : drafters()) {
        d->state = d->alive() ? WorkerState::Stopping : WorkerState::Restarting;
        d->restart_requested = false;
        if (!d->alive() || d == &cause) continue;
        if (kill_others) {
            console_.info("{} (pid {}): SIGKILL, its gang restarts", d->spec.name, d->pid);
            signal_worker(*d, SIGKILL);
        } else {
            // It checkpoints with the gang and exits by itself; SIGKILL if it does not.
            d->kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(cfg_.supervisor.stop_timeout_s));
        }
    }
}

void Supervisor::signal_worker(Worker& w, int sig) {
    if (!w.alive()) return;
    // The worker leads its own process group: helpers it started get the signal too.
    ::kill(-w.pid, sig);
    ::kill(w.pid, sig);
}

bool Supervisor::any_alive() const {
    return std::any_of(workers_.begin(), workers_.end(), [](const auto& w) { return w->alive(); });
}

Worker* Supervisor::find_by_pid(pid_t pid) {
    for (auto& w : workers_)
        if (w->pid == pid) return w.get();
    return nullptr;
}

Worker& Supervisor::find_by_name(const std::string& name) {
    std::vector<WorkerSpec> specs;
    for (const auto& w : workers_) specs.push_back(w->spec);
    return *workers_[find_worker(specs, name)];
}

} // namespace hsring::supervisor
