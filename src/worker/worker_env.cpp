#include "worker/worker_env.hpp"

#include "hsring/error.hpp"
#include "hsring/ledger.hpp"
#include "hsring/status_board.hpp"
#include "hsring/log.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <exception>

namespace hsring::worker {
namespace {

std::atomic<bool> g_stop{false};
bool g_started = false;

void on_stop_signal(int) { g_stop.store(true, std::memory_order_relaxed); }

std::string env_or(const char* key, const std::string& fallback) {
    const char* v = std::getenv(key);
    return v && *v ? v : fallback;
}

} // namespace

bool stop_requested() { return g_stop.load(std::memory_order_relaxed); }

std::uint32_t WorkerEnv::stats_index() const {
    return role == WorkerRole::Target ? rank : StatusBoard::kDrafterStatsBase + rank;
}

WorkerEnv parse_worker_env(int argc, char** argv, const Derived* d) {
    WorkerEnv e;
    std::string role = env_or("HSRING_ROLE", "");
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) fail("{} needs a value", a);
            return argv[++i];
        };
        if (a == "--role") role = value();
        else if (a == "--config") e.config_file = value();
        else if (a == "--run-dir") e.run_dir = value();
        else fail("unknown argument '{}' (usage: {} [--role target|drafter] --config FILE --run-dir DIR)", a, argv[0]);
    }
    if (role == "target") e.role = WorkerRole::Target;
    else if (role == "drafter") e.role = WorkerRole::Drafter;
    else fail("the worker role must be target or drafter (--role or HSRING_ROLE), got '{}'", role);
    if (e.config_file.empty()) fail("--config FILE is required");
    e.rank = static_cast<std::uint32_t>(std::atoi(env_or("HSRING_RANK", "0").c_str()));
    e.incarnation = static_cast<std::uint32_t>(std::atoi(env_or("HSRING_INCARNATION", "1").c_str()));
    e.name = env_or("HSRING_WORKER_NAME", role + "." + std::to_string(e.rank));
    e.cuda = env_or("HSRING_DEVICE", "cpu") == "cuda";
    e.supervisor = static_cast<pid_t>(std::atoi(env_or("HSRING_SUPERVISOR_PID", "0").c_str()));
    const std::string ring_default = d ? d->ring_name : "", run_dir_default = d ? d->run_dir.string() : "";
    e.ring = env_or("HSRING_RING", ring_default);
    e.ledger = env_or("HSRING_LEDGER", Ledger::name_for_ring(e.ring));
    e.status = StatusBoard::name_for_ring(e.ring);
    if (e.run_dir.empty()) e.run_dir = run_dir_default;
    if (e.ring.empty() || e.run_dir.empty()) fail("the ring name and run dir are unknown: start workers with `hsring run`");
    return e;
}

void setup_process(const WorkerEnv& env) {
    log::set_name(env.name);
    struct sigaction sa{};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);
    // PR_SET_PDEATHSIG was set before exec; if the supervisor died before that, we would never
    // get the signal: check once now.
    if (env.supervisor > 0 && ::getppid() != env.supervisor) {
        log::warn("the supervisor (pid {}) is gone: exiting", env.supervisor);
        std::exit(kExitOk);
    }
}

void mark_started() { g_started = true; }

int run_guarded(const char* program, int (*body)(int, char**), int argc, char** argv) {
    try {
        return body(argc, argv);
    } catch (const Error& e) {
        log::error("{}", e.what());
        return g_started ? kExitFailure : kExitUserError;
    } catch (const std::exception& e) {
        log::error("{} failed: {}", program, e.what());
        return kExitFailure;
    }
}

} // namespace hsring::worker
