#pragma once
// The files of a run directory, and run.json: what `hsring run` records so that the control
// commands, `hsring ledger verify` and the next supervisor of the same run find it.
//
//   RUN_DIR/run.json              this record (rewritten atomically: start, each worker start, end)
//   RUN_DIR/control.sock          the supervisor's control socket (mode 0600)
//   RUN_DIR/supervisor.lock       flock held by the running supervisor (one per run dir)
//   RUN_DIR/logs/<worker>.log     each worker's stdout and stderr, appended across restarts
//   RUN_DIR/checkpoints/latest    step of the drafter's latest committed checkpoint (the drafter writes it)
//   RUN_DIR/train-log.<rank>.txt  each local drafter rank's train log (include/hsring/train_log.hpp)
#include "hsring/ledger.hpp"
#include "hsring/train_log.hpp"

#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hsring::supervisor {

namespace fs = std::filesystem;

struct RunFiles {
    fs::path dir;  // absolute

    fs::path run_json() const { return dir / "run.json"; }
    fs::path control_socket() const { return dir / "control.sock"; }
    fs::path lock_file() const { return dir / "supervisor.lock"; }
    fs::path logs_dir() const { return dir / "logs"; }
    fs::path worker_log(std::string_view worker) const { return logs_dir() / (std::string(worker) + ".log"); }
    fs::path latest_checkpoint() const { return dir / "checkpoints" / "latest"; }
    fs::path train_log(std::uint32_t drafter_rank) const { return train_log_path(dir, drafter_rank); }
};

// The step in RUN_DIR/checkpoints/latest; nullopt when there is no checkpoint yet. A file that
// does not hold a step is an error naming it.
std::optional<std::uint64_t> read_latest_checkpoint(const RunFiles& files);

// sockaddr_un holds 108 bytes with the terminating NUL: a longer socket path is an error saying
// how to shorten it.
void check_socket_path(const fs::path& socket);

// A worker process started by a supervisor, so that the next supervisor can wait for it (after a
// supervisor is killed, its workers finish their unit of work before they exit).
struct WorkerRecord {
    std::string name;
    pid_t pid = 0;
    std::uint32_t incarnation = 0;
    std::uint64_t start_ticks = 0;  // /proc start time: tells a reused pid apart
};

struct RunEnd {
    std::string time;       // ISO 8601, local time
    int exit_code = 0;
    std::string reason;
    bool complete = false;  // every epoch trained and this machine's run dir verified (train logs vs checkpoint)
};

struct RunRecord {
    std::string config;     // absolute path of the config file
    std::string ring, ledger;
    std::uint64_t samples = 0;   // of the whole data set
    std::uint32_t epochs = 1;
    std::uint64_t fingerprint = 0;
    std::uint64_t seed = 0;
    bool shuffle = true;
    std::uint32_t nnodes = 1, node_rank = 0;  // this machine's place in the run
    std::uint32_t drafters = 1;               // drafter ranks on this machine (train-log.<rank>.txt)
    std::uint64_t max_steps = 0;              // [train] max_steps: > 0 ends the run before every epoch
    // Which run this machine belongs to, for `hsring ledger verify` over several machines' run dirs
    // (invariant 8, docs/architecture.md). Empty / 0 / null in a run.json of an older hsring: unknown.
    std::string name;               // [run] name (machines sharing a host need names of their own)
    std::string master_addr;        // the master as this machine reaches it
    std::uint32_t master_port = 0;  // the rendezvous port: the same on every machine of a run
    nlohmann::json identity;        // run_identity(): what the machines must agree on at rendezvous
    std::string started;    // ISO 8601, local time
    pid_t supervisor_pid = 0;
    std::uint64_t supervisor_start_ticks = 0;
    std::vector<WorkerRecord> workers;  // the latest process of each worker name
    std::optional<RunEnd> end;

    // The facts of this machine's ledger (its share of the data set).
    LedgerInfo ledger_info() const;
};

// Write to a temporary file and rename, so a reader never sees half a record.
void write_run_record(const RunFiles& files, const RunRecord& record);
// Throws hsring::Error naming the file and the missing or malformed key.
RunRecord read_run_record(const fs::path& file);

// Local time as "2026-11-30T12:03:04".
std::string iso_time_now();

} // namespace hsring::supervisor
