// Starting workers, and what happens when one ends (see supervisor.hpp, restart_policy.hpp and
// src/worker/CONTRACT.md).
#include "supervisor/supervisor.hpp"

#include "hsring/error.hpp"
#include "supervisor/spawn.hpp"

#include <signal.h>
#include <unistd.h>

namespace hsring::supervisor {

void Supervisor::start_worker(Worker& w) {
    const WorkerSpec& s = w.spec;

    const std::uint32_t incarnation = incarnation_base_ + w.starts + 1;
    SpawnSpec spec;
    spec.program = w.program;
    spec.argv.push_back(s.program);
    spec.argv.insert(spec.argv.end(), s.role_args.begin(), s.role_args.end());
    spec.argv.insert(spec.argv.end(), {"--config", record_.config, "--run-dir", files_.dir.string()});
    spec.env = {
        {"HSRING_WORKER_NAME", s.name},
        {"HSRING_ROLE", to_string(s.role)},
        {"HSRING_RANK", std::to_string(s.rank)},
        {"HSRING_INCARNATION", std::to_string(incarnation)},
        {"HSRING_RING", derived_.ring_name},
        {"HSRING_LEDGER", record_.ledger},
        {"CUDA_VISIBLE_DEVICES", s.place.is_cpu() ? "" : std::to_string(s.place.gpu)},
        {"HSRING_DEVICE", s.place.is_cpu() ? "cpu" : "cuda"},
        {"HSRING_SUPERVISOR_PID", std::to_string(::getpid())},
    };

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
        after_failure(w, true);
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
    Ledger* ledger = &mem_->ledger;
    const ReclaimResult r = mem_->ring.reclaim({pid, w.incarnation}, [ledger](std::uint64_t t) { ledger->repend_ticket(t); });
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
    if (w.restart_requested) {  // hsring restart: at once, whatever the policy says
        start_or_fail(w);
        return;
    }
    if (reason.fatal()) {
        w.state = WorkerState::Failed;
        const std::string& line = w.output.last_stderr_line();
        begin_stop(Phase::Stopping, kFatalExitCode,
                   fmt::format("{} stopped the run with a user error (exit code 3): {}", w.spec.name,
                               line.empty() ? "(it printed no message; see " + files_.worker_log(w.spec.name).string() + ")" : line));
        return;
    }
    if (w.spec.role == WorkerRole::Drafter && !reason.failed() && mem_->ledger.done()) {
        w.state = WorkerState::Exited;
        begin_stop(Phase::Completing, 0, "complete");
        return;
    }
    // Exiting cleanly once the run is done (or stopping) is what a target does: not a restart case.
    if (!reason.failed() && (mem_->ledger.done() || mem_->ring.stopping())) {
        w.state = WorkerState::Exited;
        return;
    }
    after_failure(w, reason.failed());
}

void Supervisor::after_failure(Worker& w, bool failed) {
    const RestartDecision d = policy_->decide(failed, w.history, Clock::now());
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
        const std::string& line = w.output.last_stderr_line();
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
