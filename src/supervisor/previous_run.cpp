// Taking over from an earlier supervisor (see previous_run.hpp).
#include "supervisor/previous_run.hpp"

#include "hsring/error.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace hsring::supervisor {

namespace {

bool record_alive(pid_t pid, std::uint64_t start_ticks) {
    // Without a start time a reused pid would look alive: then trust nothing.
    return pid > 0 && start_ticks != 0 && process_alive(pid, start_ticks);
}

} // namespace

void check_same_data(const std::optional<RunRecord>& previous, const RunFiles& files, const RunRecord& now) {
    const auto step = read_latest_checkpoint(files);
    if (!step) return;  // nothing trained is kept: any data set will do
    const std::string dir = files.dir.string();
    if (!previous)
        fail("{} holds the checkpoint of step {} but no readable run.json saying which data set it was trained on: "
             "hsring does not resume it on a data set it cannot check. Start over in another run directory "
             "(--run-dir DIR)", dir, *step);
    const RunRecord& p = *previous;
    std::string diff;
    auto add = [&](bool differs, const std::string& text) {
        if (differs) diff += (diff.empty() ? "" : "; ") + text;
    };
    add(p.fingerprint != now.fingerprint || p.samples != now.samples,
        fmt::format("its data set had {} samples, fingerprint {:016x}; this run's has {} samples, fingerprint {:016x}",
                    p.samples, p.fingerprint, now.samples, now.fingerprint));
    add(p.seed != now.seed || p.shuffle != now.shuffle,
        fmt::format("its sample order came from [run] seed {} with [data] shuffle = {}; this run has seed {}, shuffle = {}",
                    p.seed, p.shuffle, now.seed, now.shuffle));
    add(p.nnodes != now.nnodes || p.node_rank != now.node_rank,
        fmt::format("it was machine {} of {}; this run is machine {} of {}", p.node_rank, p.nnodes, now.node_rank,
                    now.nnodes));
    if (!diff.empty())
        fail("{} holds the checkpoint of step {} of another data set or order: {}. Resuming would mark and train "
             "other samples than the ones in the weights. Use that run's data set and settings again, or start "
             "over in another run directory (--run-dir DIR)", dir, *step, diff);
}

void check_previous_supervisor(const RunRecord& r) {
    if (r.supervisor_pid != ::getpid() && record_alive(r.supervisor_pid, r.supervisor_start_ticks))
        fail("a supervisor (pid {}) is already running this run: see `hsring status`, stop it with `hsring stop`",
             r.supervisor_pid);
}

std::size_t wait_for_previous_workers(const RunRecord& r, double timeout_s, Console& console) {
    std::vector<const WorkerRecord*> alive;
    for (const auto& w : r.workers)
        if (record_alive(w.pid, w.start_ticks)) alive.push_back(&w);
    if (alive.empty()) return 0;
    std::string names;
    for (const auto* w : alive) names += fmt::format("{}{} (pid {})", names.empty() ? "" : ", ", w->name, w->pid);
    console.info("waiting up to {:g} s for the workers of the previous supervisor (pid {}) to finish their work and "
                 "exit: {}", timeout_s, r.supervisor_pid, names);
    // They got SIGTERM when their supervisor died; send it again in case they were started by a
    // supervisor that had not set it yet.
    for (const auto* w : alive) signal_process(w->pid, w->start_ticks, SIGTERM);
    const std::size_t count = alive.size();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    bool killed = false;
    for (;;) {
        std::erase_if(alive, [](const WorkerRecord* w) { return !record_alive(w->pid, w->start_ticks); });
        if (alive.empty()) break;
        if (std::chrono::steady_clock::now() > deadline) {
            if (killed) fail("{} (pid {}) of the previous supervisor survived SIGKILL", alive[0]->name, alive[0]->pid);
            for (const auto* w : alive) {
                console.warn("{} (pid {}) of the previous supervisor did not exit within {:g} s ([supervisor] "
                             "stop_timeout_s): killing it", w->name, w->pid, timeout_s);
                // Through a pidfd, after checking its start time: a pid reused meanwhile is spared.
                // Its process group too: it may have helpers.
                signal_process(w->pid, w->start_ticks, SIGKILL, true);
            }
            killed = true;
            deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return count;
}

std::uint32_t max_incarnation_seen(const std::optional<RunRecord>& record, const Ring& ring,
                                   const StatusBoard& status) {
    std::uint32_t m = 0;
    if (record)
        for (const auto& w : record->workers) m = std::max(m, w.incarnation);
    for (std::uint32_t i = 0; i < StatusBoard::kMaxWorkers; ++i) m = std::max(m, status.stats(i).incarnation);
    for (std::uint32_t s = 0; s < ring.geometry().slot_count; ++s)
        if (auto o = ring.owner_of(s)) m = std::max(m, o->incarnation);
    return m;
}

} // namespace hsring::supervisor
