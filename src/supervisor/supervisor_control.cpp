// Control requests and the run's status (see control_client.hpp for the protocol, status.hpp).
#include "supervisor/supervisor.hpp"
#include "supervisor/spec_final.hpp"

#include "hsring/error.hpp"

#include <signal.h>
#include <unistd.h>

namespace hsring::supervisor {

using nlohmann::json;

ControlReply Supervisor::on_control(const json& req) {
    const std::string cmd = req.value("cmd", "");
    auto ok = [](std::string message) { return ControlReply{{{"ok", true}, {"message", std::move(message)}}, false}; };
    if (cmd == "status") return {{{"ok", true}, {"status", collect_status(false)}}, false};
    if (cmd == "stop") {
        const bool now = req.value("now", false);
        const bool wait = req.value("wait", false);
        if (now) begin_stop(Phase::Killing, 0, "stopped at once (hsring stop --now)");
        else begin_stop(Phase::Stopping, 0, "stop requested (hsring stop)");
        ControlReply r = ok(fmt::format("run '{}' is {} (supervisor pid {})", cfg_.run.name, phase_name(phase_), ::getpid()));
        r.hold = wait;
        return r;
    }
    if (cmd == "restart" || cmd == "kill") {
        Worker& w = find_by_name(req.value("worker", ""));
        if (phase_ != Phase::Running) fail("the run is {}: workers are not restarted any more", phase_name(phase_));
        if (cmd == "kill") {
            if (!w.alive()) fail("{} has no process to kill (it is {})", w.spec.name, to_string(w.state));
            const pid_t pid = w.pid;
            signal_worker(w, SIGKILL);
            console_.warn("{} (pid {}) killed on request (hsring kill); [supervisor] restart = \"{}\" applies",
                          w.spec.name, pid, hsring::to_string(cfg_.supervisor.restart));
            return ok(fmt::format("SIGKILL sent to {} (pid {})", w.spec.name, pid));
        }
        if (w.alive()) {
            // Like a graceful stop of that one worker: it finishes its unit of work (a target
            // commits its slot, the drafter checkpoints), then starts again at once.
            w.restart_requested = true;
            w.state = WorkerState::Stopping;
            w.kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(cfg_.supervisor.stop_timeout_s));
            signal_worker(w, SIGTERM);
            console_.info("restarting {} on request: SIGTERM to pid {}", w.spec.name, w.pid);
            return ok(fmt::format("SIGTERM sent to {} (pid {}); it starts again when it has exited", w.spec.name, w.pid));
        }
        if (w.spec.role == WorkerRole::Drafter) {
            const auto gang = drafters();
            if (std::any_of(gang.begin(), gang.end(), [](const Worker* d) { return d->alive(); }))
                fail("{} is not running but other drafters of its gang are: restart one of them (the whole gang "
                     "restarts)", w.spec.name);
            console_.info("starting the drafter gang on request ({} was {})", w.spec.name, to_string(w.state));
            start_gang();
            return ok(fmt::format("drafter gang started ({} pid {})", w.spec.name, w.pid));
        }
        console_.info("starting {} on request (it was {})", w.spec.name, to_string(w.state));
        start_or_fail(w);
        return ok(fmt::format("{} started (pid {})", w.spec.name, w.pid));
    }
    fail("unknown control command '{}' (known: status, restart, kill, stop)", cmd);
}

json Supervisor::collect_status(bool update_rates) {
    StatusInputs in;
    in.name = cfg_.run.name;
    in.run_dir = files_.dir.string();
    in.config = record_.config;
    in.phase = phase_name(phase_);
    in.mode = cfg_.run.mode == RunMode::Synthetic ? "synthetic" : "train";
    in.pid = ::getpid();
    in.uptime_s = std::chrono::duration<double>(Clock::now() - start_time_).count();
    const Ring& ring = mem_->ring;
    // Who holds which slot (for drills: kill a worker while it holds one).
    std::vector<std::pair<Owner, SlotState>> held;
    for (std::uint32_t i = 0; i < ring.geometry().slot_count; ++i)
        if (auto o = ring.owner_of(i)) held.emplace_back(*o, ring.state(i));
    for (auto& w : workers_) {
        WorkerStatus s;
        s.name = w->spec.name;
        s.role = to_string(w->spec.role);
        s.rank = w->spec.rank;
        s.place = w->spec.place.str();
        s.pid = w->pid;
        s.restarts = w->restarts;
        s.incarnation = w->incarnation;
        s.last_exit = w->last_exit ? w->last_exit->str() : "";
        s.log = files_.worker_log(w->spec.name).string();
        // The stats of the last process stay readable after it ended (the final step and loss).
        s.stats = mem_->status.stats(w->spec.stats_index);
        s.has_stats = w->last_pid > 0 && s.stats.pid == w->last_pid;
        // A process that published its stats is up (it attached the ring and the ledger).
        if (w->alive() && s.has_stats && w->state == WorkerState::Starting) w->state = WorkerState::Running;
        if (w->alive() && s.has_stats) s.rate = update_rates ? rates_.update(s.name, s.stats) : rates_.last(s.name);
        for (const auto& [o, st] : held) {
            if (!w->alive() || o != Owner{w->pid, w->incarnation}) continue;
            (st == SlotState::Writing ? s.writing : s.reading) += 1;
        }
        s.state = to_string(w->state);
        if (w->alive()) {
            const char st = process_state(w->pid);
            s.suspended = st == 'T' || st == 't';  // SIGSTOP, Ctrl-Z, a debugger
        }
        in.workers.push_back(std::move(s));
    }
    in.ring_name = ring.name();
    in.slots = ring.geometry().slot_count;
    in.occupancy = ring.occupancy();
    in.counters = ring.counters();
    in.stopping = ring.stopping();
    in.ledger_name = record_.ledger;
    in.total = mem_->ledger.total();
    in.counts = mem_->ledger.counts();
    in.done = mem_->ledger.done();
    in.spec = last_tau(files_.dir / "metrics.jsonl");
    in.world = cfg_.distributed.nnodes * static_cast<std::uint32_t>(cfg_.topology.drafters.size());
    if (!reformations_) reformations_.emplace(files_.dir / "metrics.jsonl");
    in.reformations = reformations_->rows();
    in.reformations_total = reformations_->total();
    return status_json(in);
}

void Supervisor::show_status() { console_.status(status_line(collect_status(true))); }

} // namespace hsring::supervisor
