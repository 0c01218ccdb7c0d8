#pragma once
// A synthetic-mode run without the supervisor: the test plays the supervisor's part (creates
// ring + ledger + status board, starts workers with the CONTRACT.md environment, reclaims and restarts) so the
// worker loops' exactly-once behaviour is tested on its own.
#include "hsring/config.hpp"
#include "hsring/dataset.hpp"
#include "hsring/ledger.hpp"
#include "hsring/ring.hpp"
#include "hsring/status_board.hpp"

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <string>

namespace hsring::test {

struct WorkerProc {
    std::string role;
    unsigned rank = 0;
    unsigned incarnation = 0;
    pid_t pid = 0;
};

class SynthRun {
public:
    // Writes a config and a data set of `samples` samples into a fresh temp dir, creates the
    // ring, the ledger and the status board. `extra_toml` is appended to the config.
    // mode "synthetic" runs hsring-synth-worker, "train" runs hsring-target / hsring-drafter.
    // train_extra goes into [train], drafter_extra into [drafter].
    SynthRun(unsigned samples, unsigned epochs, const std::string& train_extra = "", const std::string& mode = "synthetic",
             const std::string& drafter_extra = "");
    ~SynthRun();

    WorkerProc& start(const std::string& role, unsigned rank, const std::map<std::string, std::string>& env = {});
    // Waits up to `seconds`; returns the wait status, -1 on timeout (then the process is killed).
    int wait(WorkerProc& w, double seconds);
    // SIGKILL + reap + reclaim its slots (the supervisor's part).
    void kill(WorkerProc& w);
    bool alive(const WorkerProc& w) const;

    Ring& ring() { return *ring_; }
    Ledger& ledger() { return *ledger_; }
    StatusBoard& status() { return *status_; }
    const std::filesystem::path& run_dir() const { return run_dir_; }
    const std::filesystem::path& dir() const { return dir_; }
    const Config& config() const { return cfg_; }

private:
    std::filesystem::path dir_, run_dir_, config_file_;
    Config cfg_;
    std::unique_ptr<Ring> ring_;
    std::unique_ptr<Ledger> ledger_;
    std::unique_ptr<StatusBoard> status_;
    std::string ring_name_, ledger_name_, status_name_, mode_;
    unsigned next_incarnation_ = 1;
    std::map<pid_t, WorkerProc> procs_;
};

} // namespace hsring::test
