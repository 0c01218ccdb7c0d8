#pragma once
// What a worker process is told by the supervisor (CONTRACT.md): its name, role, rank,
// incarnation, the ring and ledger names, the config and the run directory. The status board's
// name follows from the ring's. Also the process
// set-up every worker shares: log name, SIGTERM/SIGINT -> stop flag, parent-death check.
#include "hsring/config.hpp"
#include "hsring/worker_contract.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>

namespace hsring::worker {

struct WorkerEnv {
    std::string name;         // "target.0"
    WorkerRole role = WorkerRole::Target;
    std::uint32_t rank = 0;   // local rank: index in its [topology] list
    std::uint32_t incarnation = 1;
    std::string ring, ledger, status;
    std::filesystem::path config_file, run_dir;
    bool cuda = false;        // HSRING_DEVICE=cuda
    pid_t supervisor = 0;
    // Drafters: where this rank sits in the data-parallel gang, and how to reach the master.
    GangPlace gang;
    std::string master_addr;
    std::uint32_t master_port = 0;
    double dist_timeout_s = 600;
    std::uint32_t gang_generation = 0;

    std::uint32_t stats_index() const { return hsring::stats_index(role, rank); }
};

// Parses `--role R --config F --run-dir D` and the HSRING_* environment; a worker started by
// hand without a supervisor gets defaults from the config (ring name, run dir, rank 0, the
// [distributed] table). Throws hsring::Error on a malformed command line or environment.
WorkerEnv parse_worker_env(int argc, char** argv, const Config* cfg = nullptr, const Derived* defaults = nullptr);

// Installs SIGTERM/SIGINT handlers that set the stop flag, sets the log name, and exits(0) if
// the supervisor that started us is already gone.
void setup_process(const WorkerEnv& env);

// Set by SIGTERM/SIGINT (graceful stop or supervisor death via PR_SET_PDEATHSIG).
bool stop_requested();

// Exit codes (include/hsring/worker_contract.hpp).
inline constexpr int kExitOk = exit_code::kOk;
inline constexpr int kExitFailure = exit_code::kFailure;
inline constexpr int kExitUserError = exit_code::kUserError;

// Runs `body`. An hsring::Error before mark_started() (bad config, data or model: restarting
// cannot help) exits 3, and so does an hsring::UserError at any time; any other error after it,
// or any other exception, exits 1 (restartable).
// Either way one message goes to stderr.
int run_guarded(const char* program, int (*body)(int, char**), int argc, char** argv);
void mark_started();

} // namespace hsring::worker
