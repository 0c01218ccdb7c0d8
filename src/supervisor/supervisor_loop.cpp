// The supervisor's poll() loop, its timers, stops and the end of a run (see supervisor.hpp).
#include "supervisor/supervisor.hpp"

#include "hsring/error.hpp"
#include "hsring/train_log.hpp"
#include "supervisor/spec_final.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace hsring::supervisor {

using nlohmann::json;

const char* Supervisor::phase_name(Phase p) {
    switch (p) {
    case Phase::Running: return "running";
    case Phase::Completing: return "completing";
    case Phase::Stopping: return "stopping";
    case Phase::Killing: return "killing";
    }
    return "?";
}

Supervisor::Supervisor(RunOptions opts) : opts_(std::move(opts)) {}

Supervisor::~Supervisor() {
    kill_and_reap();  // only does something when start-up or the loop threw
    if (lock_fd_ >= 0) ::close(lock_fd_);
}

void Supervisor::kill_and_reap() {
    for (auto& w : workers_) {
        if (!w->alive()) continue;
        signal_worker(*w, SIGKILL);
        ::waitpid(w->pid, nullptr, 0);
        if (mem_) mem_->ring.reclaim({w->pid, w->incarnation}, mem_->repend());
        w->pid = 0;
    }
}

int Supervisor::run() {
    try {
        start();
    } catch (const std::exception& e) {
        // Nothing half-started stays: no orphan worker, no ring, ledger or status board that this
        // start made (re-attached ones keep their READY slots), and run.json says why.
        kill_and_reap();
        if (mem_) {
            const bool ring_created = mem_->ring_created, ledger_created = mem_->ledger_created,
                       status_created = mem_->status_created;
            mem_.reset();
            if (ring_created) {
                remove_run_memory(derived_.ring_name);
            } else {
                if (ledger_created) Ledger::remove(Ledger::name_for_ring(derived_.ring_name));
                if (status_created) StatusBoard::remove(StatusBoard::name_for_ring(derived_.ring_name));
            }
        }
        if (record_.started.empty() && made_run_dir_) {
            // A refused start leaves no half-made run dir (logs/ and supervisor.lock of nothing).
            if (lock_fd_ >= 0) ::close(lock_fd_);
            lock_fd_ = -1;
            std::error_code ec;
            std::filesystem::remove_all(files_.dir, ec);
        }
        if (!record_.started.empty()) {
            record_.end = RunEnd{iso_time_now(), 2, e.what()};
            try {
                write_record();
            } catch (const Error&) {
            }
        }
        throw;
    }
    next_status_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(cfg_.supervisor.status_interval_s));
    loop();
    return finish();
}

void Supervisor::loop() {
    std::vector<pollfd> fds;
    while (phase_ == Phase::Running || any_alive()) {
        fds.clear();
        fds.push_back({signals_->fd(), POLLIN, 0});
        const std::size_t control_begin = fds.size();
        control_->poll_fds(fds);
        const std::size_t control_end = fds.size();
        for (const auto& w : workers_)
            for (int fd : {w->output.out_fd(), w->output.err_fd()})
                if (fd >= 0) fds.push_back({fd, POLLIN, 0});

        const int n = ::poll(fds.data(), fds.size(), poll_timeout_ms());
        if (n < 0 && errno != EINTR) fail("poll: {}", errno_text(errno));
        if (n > 0) {
            // Output first: a worker's last lines are logged before its exit is handled.
            for (std::size_t i = control_end; i < fds.size(); ++i) {
                if (!fds[i].revents) continue;
                for (auto& w : workers_)
                    if (fds[i].fd == w->output.out_fd() || fds[i].fd == w->output.err_fd())
                        w->output.pump(fds[i].fd, w->spec.name, console_);
            }
            if (fds[0].revents) on_signals();
            control_->service({fds.begin() + static_cast<std::ptrdiff_t>(control_begin),
                               fds.begin() + static_cast<std::ptrdiff_t>(control_end)},
                              [this](const json& r) { return on_control(r); });
        }
        tick();
    }
}

void Supervisor::on_signals() {
    for (int sig : signals_->read()) {
        if (sig == SIGCHLD) {
            reap();
        } else if (sig == SIGINT) {
            if (++sigints_ == 1)
                begin_stop(Phase::Stopping, 0, "interrupted (SIGINT): stopping gracefully; Ctrl-C again stops at once");
            else
                begin_stop(Phase::Killing, 130, "interrupted twice (SIGINT): stopped at once");
        } else {
            begin_stop(Phase::Stopping, 0, fmt::format("{} received: stopping gracefully", signal_name(sig)));
        }
    }
}

void Supervisor::reap() {
    for (;;) {
        int status = 0;
        const pid_t pid = ::waitpid(-1, &status, WNOHANG);
        if (pid <= 0) return;
        if (Worker* w = find_by_pid(pid)) on_exit(*w, status);
        // else: a child whose exec failed in spawn() (already reported there)
    }
}

void Supervisor::tick() {
    const auto now = Clock::now();
    control_->expire();
    for (auto& w : workers_) {
        // Drafters start again as a gang (below), never one by one.
        if (w->state == WorkerState::Restarting && phase_ == Phase::Running && now >= w->next_start &&
            w->spec.role != WorkerRole::Drafter)
            start_or_fail(*w);
        if (w->alive() && w->kill_at && now >= *w->kill_at) {
            console_.warn("{} (pid {}) did not exit within {:g} s of SIGTERM ([supervisor] stop_timeout_s): SIGKILL",
                          w->spec.name, w->pid, cfg_.supervisor.stop_timeout_s);
            signal_worker(*w, SIGKILL);
            w->kill_at.reset();
        }
    }
    if (gang_start_at_ && phase_ == Phase::Running && now >= *gang_start_at_) {
        const auto gang = drafters();
        if (std::none_of(gang.begin(), gang.end(), [](const Worker* d) { return d->alive(); })) start_gang();
    }
    if ((phase_ == Phase::Stopping || phase_ == Phase::Completing) && now >= stop_deadline_ && any_alive()) {
        for (auto& w : workers_) {
            if (!w->alive()) continue;
            console_.warn("{} (pid {}) is still running {:g} s after the stop began ([supervisor] stop_timeout_s): SIGKILL",
                          w->spec.name, w->pid, cfg_.supervisor.stop_timeout_s);
            signal_worker(*w, SIGKILL);
        }
        stop_deadline_ = Clock::time_point::max();
    }
    // Nothing alive, nothing to restart, and nobody said why: end rather than idle forever.
    if (phase_ == Phase::Running && !any_alive() &&
        std::none_of(workers_.begin(), workers_.end(), [](const auto& w) { return w->state == WorkerState::Restarting; }))
        begin_stop(Phase::Stopping, 1, "no worker is running and none is due to restart");
    if (now >= next_status_) {
        show_status();
        next_status_ = now + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(cfg_.supervisor.status_interval_s));
    }
}

int Supervisor::poll_timeout_ms() const {
    auto next = next_status_;
    for (const auto& w : workers_) {
        if (w->state == WorkerState::Restarting && phase_ == Phase::Running) next = std::min(next, w->next_start);
        if (w->kill_at) next = std::min(next, *w->kill_at);
    }
    if (gang_start_at_ && phase_ == Phase::Running) next = std::min(next, *gang_start_at_);
    if (phase_ == Phase::Stopping || phase_ == Phase::Completing) next = std::min(next, stop_deadline_);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
    // Wake at least every second: the control server expires idle clients.
    return static_cast<int>(std::clamp<long long>(ms + 1, 0, 1000));
}

void Supervisor::begin_stop(Phase phase, int exit_code, std::string reason) {
    if (phase == Phase::Killing) {
        if (phase_ == Phase::Killing) return;
        if (phase_ == Phase::Running || exit_code_ == 0) {
            exit_code_ = exit_code;
            end_reason_ = reason;
        }
        phase_ = Phase::Killing;
        gang_start_at_.reset();
        console_.warn("{}: SIGKILL to every worker; the ring and the ledger are kept", reason);
        for (auto& w : workers_) {
            if (w->state == WorkerState::Restarting) w->state = WorkerState::Stopped;
            if (w->alive()) {
                w->state = WorkerState::Stopping;
                signal_worker(*w, SIGKILL);
            }
        }
        return;
    }
    if (phase_ != Phase::Running) return;  // the first reason to stop wins
    phase_ = phase;
    exit_code_ = exit_code;
    end_reason_ = std::move(reason);
    stop_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(cfg_.supervisor.stop_timeout_s));
    for (auto& w : workers_)
        if (w->state == WorkerState::Restarting) w->state = WorkerState::Stopped;
    gang_start_at_.reset();
    if (phase == Phase::Completing) {
        console_.info("the drafter trained every epoch: stopping the targets");
        for (auto& w : workers_) {
            if (!w->alive()) continue;
            w->state = WorkerState::Stopping;
            signal_worker(*w, SIGTERM);
        }
        return;
    }
    // Graceful: through the ring, not signals. Targets stop claiming; the drafter drains what is
    // READY, checkpoints and exits (src/worker/CONTRACT.md).
    if (exit_code_ == 0) console_.info("{}", end_reason_);
    else console_.error("{}", end_reason_);
    console_.info("stopping: targets stop claiming, the drafter drains the ring and checkpoints (at most {:g} s, "
                  "then SIGKILL)", cfg_.supervisor.stop_timeout_s);
    mem_->ring.set_stopping(true);
    for (auto& w : workers_)
        if (w->alive()) w->state = WorkerState::Stopping;
}

std::string Supervisor::summary() {
    const json st = collect_status(false);
    const json& l = st["ledger"];
    const std::uint64_t total = l["total"].get<std::uint64_t>();
    const std::uint64_t trained = l["consumed"].get<std::uint64_t>() + l["durable"].get<std::uint64_t>();
    std::string restarts;
    for (const auto& w : workers_) restarts += fmt::format("{}{} {}", restarts.empty() ? "" : ", ", w->spec.name, w->restarts);
    const auto secs = std::chrono::duration<double>(Clock::now() - start_time_).count();
    std::string s = fmt::format("run '{}' {} after {:.1f} s: {} of {} sample passes trained ({} epochs of {} samples)",
                                cfg_.run.name, complete_ ? "complete (verified)" : "stopped",
                                secs, trained, total, cfg_.data.epochs, samples_);
    if (const auto rejected = l.value("rejected", std::uint64_t{0}))
        s += fmt::format(", {} rejected (non-finite hidden states: never trained; see the targets' logs)", rejected);
    const json& d = st["drafter"];
    if (!d["step"].is_null()) s += fmt::format(", drafter step {} loss {:.4g}", d["step"].get<std::uint64_t>(), d["loss"].get<double>());
    const json& c = st["ring"]["counters"];
    s += fmt::format("; restarts: {}; ring: {} commits, {} reclaimed writing, {} reclaimed reading, {} redeliveries",
                     restarts, c["commits"].get<std::uint64_t>(), c["reclaimed_writing"].get<std::uint64_t>(),
                     c["reclaimed_reading"].get<std::uint64_t>(), c["redeliveries"].get<std::uint64_t>());
    return s;
}

std::string Supervisor::verify_completion() {
    // The drafters say every epoch is trained; the run dir must say so too (invariant 8, docs/architecture.md):
    // this machine's train logs replayed against its latest checkpoint, every position of its
    // share exactly once (with [train] max_steps: none more than once). Every rank's log in the run
    // dir: also those of an earlier run with more drafter ranks on this machine.
    try {
        const auto step = read_latest_checkpoint(files_);
        if (!step) return fmt::format("{} holds no checkpoint", files_.latest_checkpoint().string());
        std::vector<std::filesystem::path> logs;
        for (const auto& [rank, log] : train_logs_in(files_.dir)) logs.push_back(log);
        const LedgerInfo& info = mem_->ledger.info();
        const LineageReport rep = verify_positions(logs, *step, info.samples, info.epochs);
        const bool ok = cfg_.train.max_steps ? rep.doubled() == 0 : rep.ok();
        if (ok) return "";
        return fmt::format("the train logs and the checkpoint of step {} in {} do not verify: {} sample passes "
                           "missing, {} trained (or rejected) more than once (see hsring ledger verify {})", *step,
                           files_.dir.string(), rep.missing(), rep.doubled(), files_.dir.string());
    } catch (const Error& e) {
        return fmt::format("its run dir cannot be verified: {}", e.what());
    }
}

int Supervisor::finish() {
    // Every worker is gone: undo whatever a process killed at the end still held.
    console_.hide();
    mem_->ring.reclaim_dead(mem_->repend());
    bool complete = false;
    if (phase_ == Phase::Completing && exit_code_ == 0) {
        const std::string why = verify_completion();
        complete = why.empty();
        if (!complete) {
            exit_code_ = 1;
            end_reason_ = "the drafters reported every epoch trained, but " + why + ": the run is NOT complete";
        }
    }
    complete_ = complete;
    std::optional<json> tau;
    if (complete && !cfg_.eval.spec_prompts.empty())
        if (const auto step = read_latest_checkpoint(files_)) tau = measure_final_tau(cfg_, derived_, *step, console_);
    std::string text = summary();
    if (tau)
        text += fmt::format("; real tau {:.3f} ({} prompts, spec-decode with the target{})", (*tau)["tau"].get<double>(),
                            (*tau)["prompts"].get<std::size_t>(), (*tau)["lossless"].get<bool>() ? ", lossless" : ", NOT lossless");
    const bool keep = cfg_.run.keep_ring || phase_ == Phase::Killing;
    if (keep) {
        text += fmt::format("; ring '{}' and its ledger kept ({})", derived_.ring_name,
                            phase_ == Phase::Killing ? "stopped at once: the next `hsring run` re-attaches"
                                                     : "[run] keep_ring = true");
    } else {
        // The checkpoint and the train log hold everything trained: a next run rebuilds the
        // ledger from them (run_memory.hpp).
        const std::string name = derived_.ring_name;
        mem_.reset();
        remove_run_memory(name);
        text += "; ring and ledger removed";
    }
    record_.end = RunEnd{iso_time_now(), exit_code_, end_reason_, complete};
    try {
        write_record();
    } catch (const Error& e) {
        console_.warn("{}", e.what());
    }
    control_->finish({{"done", true}, {"exit_code", exit_code_}, {"reason", end_reason_}, {"summary", text}});
    control_.reset();
    console_.finish();
    if (exit_code_ != 0 && !end_reason_.empty()) console_.error("{}", end_reason_);
    console_.print(text + "\n");
    return exit_code_;
}

} // namespace hsring::supervisor
