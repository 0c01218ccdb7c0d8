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
    for (const auto* w : alive) ::kill(w->pid, SIGTERM);
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
                ::kill(-w->pid, SIGKILL);  // its process group: it may have helpers
                ::kill(w->pid, SIGKILL);
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
