#include "worker/core/worker_env.hpp"

#include "hsring/error.hpp"
#include "hsring/ledger.hpp"
#include "hsring/status_board.hpp"
#include "hsring/log.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string_view>

namespace hsring::worker {
namespace {

std::atomic<bool> g_stop{false};
bool g_started = false;

void on_stop_signal(int) { g_stop.store(true, std::memory_order_relaxed); }

std::string env_or(const char* key, const std::string& fallback) {
    const char* v = std::getenv(key);
    return v && *v ? v : fallback;
}

std::uint32_t env_number(const char* key, std::uint32_t fallback) {
    const char* v = std::getenv(key);
    if (!v || !*v) return fallback;
    char* end = nullptr;
    const unsigned long n = std::strtoul(v, &end, 10);
    if (end == v || *end || n > 0xffffffffUL) fail("{}={} is not a whole number", key, v);
    return static_cast<std::uint32_t>(n);
}

} // namespace

bool stop_requested() { return g_stop.load(std::memory_order_relaxed); }

WorkerEnv parse_worker_env(int argc, char** argv, const Config* cfg, const Derived* d) {
    WorkerEnv e;
    std::string role = env_or(env::kRole, "");
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
    e.rank = env_number(env::kRank, 0);
    e.incarnation = env_number(env::kIncarnation, 1);
    e.name = env_or(env::kWorkerName, role + "." + std::to_string(e.rank));
    e.cuda = env_or(env::kDevice, "cpu") == "cuda";
    e.supervisor = static_cast<pid_t>(env_number(env::kSupervisorPid, 0));
    const std::string ring_default = d ? d->ring_name : "", run_dir_default = d ? d->run_dir.string() : "";
    e.ring = env_or(env::kRing, ring_default);
    e.ledger = env_or(env::kLedger, Ledger::name_for_ring(e.ring));
    // The gang: the supervisor passes the effective values (launcher variables and --node-rank
    // applied); a drafter started by hand reads the config's [distributed] table.
    const DistributedConfig dist = cfg ? cfg->distributed : DistributedConfig{};
    const auto drafters = cfg ? static_cast<std::uint32_t>(cfg->topology.drafters.size()) : 1u;
    e.gang.node_rank = env_number(env::kNodeRank, dist.node_rank);
    e.gang.nnodes = env_number(env::kNnodes, dist.nnodes);
    e.gang.local_world = env_number(env::kLocalWorld, drafters);
    e.gang.local_rank = e.role == WorkerRole::Drafter ? e.rank : 0;
    e.master_addr = env_or(env::kMasterAddr, dist.master_addr);
    e.master_port = env_number(env::kMasterPort, dist.master_port);
    e.gang_generation = env_number(env::kGangGeneration, 0);
    if (const char* t = std::getenv(env::kDistTimeout); t && *t) e.dist_timeout_s = std::atof(t);
    else e.dist_timeout_s = dist.timeout_s;
    if (e.gang.nnodes == 0 || e.gang.node_rank >= e.gang.nnodes || e.gang.local_world == 0 ||
        (e.role == WorkerRole::Drafter && e.gang.local_rank >= e.gang.local_world))
        fail("inconsistent gang: machine {} of {}, drafter rank {} of {} on this machine ({}, {}, {}, {})",
             e.gang.node_rank, e.gang.nnodes, e.gang.local_rank, e.gang.local_world, env::kNodeRank, env::kNnodes,
             env::kRank, env::kLocalWorld);
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

namespace {

// c10 (LibTorch) exceptions carry their C++ backtrace in what(): a line "Exception raised from
// ... (most recent call first):" and one "frame #N: ..." line per frame, often in the middle of
// our own message ("...: {e.what()})"). The supervisor repeats a worker's last stderr line, which
// was then a frame or a lone ")". The message is written as one line with the frames cut out;
// for a failure that is not the user's they go to the log just before it.
struct SplitMessage {
    std::string text;       // one line
    std::string backtrace;  // the frames, or ""
};

SplitMessage split_message(std::string_view what) {
    SplitMessage m;
    bool in_frames = false;
    std::size_t start = 0;
    while (start <= what.size()) {
        std::size_t end = what.find('\n', start);
        if (end == std::string_view::npos) end = what.size();
        const std::string_view line = what.substr(start, end - start);
        start = end + 1;
        if (line.starts_with("Exception raised from ")) in_frames = true;
        else if (in_frames && !line.starts_with("frame #")) in_frames = false;
        if (in_frames) {
            m.backtrace += std::string(line) + "\n";
            continue;
        }
        std::string_view rest = line;
        while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
        if (rest.empty()) continue;
        // What closes our own message after an embedded one (")", ")."): glued on.
        const bool closing = rest.find_first_not_of(").]") == std::string_view::npos;
        if (!m.text.empty() && !closing) m.text += "; ";
        m.text += rest;
    }
    return m;
}

void report(const std::string& prefix, const std::exception& e, bool with_backtrace) {
    const SplitMessage m = split_message(e.what());
    if (with_backtrace && !m.backtrace.empty()) log::warn("where it failed (C++ backtrace):\n{}", m.backtrace);
    log::error("{}{}", prefix, m.text);
}

} // namespace

int run_guarded(const char* program, int (*body)(int, char**), int argc, char** argv) {
    try {
        return body(argc, argv);
    } catch (const UserError& e) {
        report("", e, false);
        return kExitUserError;
    } catch (const Error& e) {
        report("", e, g_started);
        return g_started ? kExitFailure : kExitUserError;
    } catch (const std::exception& e) {
        report(fmt::format("{} failed: ", program), e, true);
        return kExitFailure;
    }
}

} // namespace hsring::worker
