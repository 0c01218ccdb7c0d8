#pragma once
// One worker as the supervisor tracks it: its spec, its current process (if any), its restarts
// and how its last process ended, and the pipes of that process.
//
//   starting --stats published--> running --ended--> restarting (backoff) --> starting ...
//       |                            |       \--> exited (clean, not restarted)
//       |                            |        \-> failed (not restarted: cap, never, exit 3)
//       +----------------------------+--SIGTERM / ring stopping--> stopping --ended--> stopped
#include "supervisor/exit_reason.hpp"
#include "supervisor/line_reader.hpp"
#include "supervisor/restart_policy.hpp"
#include "supervisor/worker_spec.hpp"

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace hsring::supervisor {

class Console;

enum class WorkerState { Starting, Running, Restarting, Stopping, Exited, Failed, Stopped };
const char* to_string(WorkerState s);

// The pipes of a worker process and its log file: every line goes to RUN_DIR/logs/<name>.log and,
// prefixed, to the console. Keeps the last stderr line (repeated when a worker fails fatally).
class WorkerOutput {
public:
    WorkerOutput() = default;
    WorkerOutput(const WorkerOutput&) = delete;
    WorkerOutput& operator=(const WorkerOutput&) = delete;
    ~WorkerOutput();

    // Opens (appends to) the log file; throws with its path.
    void open_log(const std::filesystem::path& file);
    void attach(int out_fd, int err_fd);
    // A line of the supervisor's own about this worker, into its log only.
    void note(std::string_view text);
    // Reads what `fd` (one of ours) holds; closes it at end of file.
    void pump(int fd, const std::string& worker, Console& console);
    // After the process ended: reads what is left, closes both pipes.
    void drain(const std::string& worker, Console& console);
    int out_fd() const { return out_fd_; }
    int err_fd() const { return err_fd_; }
    const std::string& last_stderr_line() const { return last_err_; }

private:
    void line(std::string_view text, bool is_err, const std::string& worker, Console& console);
    void close_fd(int& fd);
    int out_fd_ = -1, err_fd_ = -1, log_fd_ = -1;
    LineReader out_, err_;
    std::string last_err_;
};

struct Worker {
    explicit Worker(WorkerSpec s) : spec(std::move(s)) {}

    WorkerSpec spec;
    std::filesystem::path program;    // spec.program, located at start
    WorkerState state = WorkerState::Starting;
    pid_t pid = 0;                    // 0 = no process now
    pid_t last_pid = 0;               // of the current / last process (its stats outlive it)
    std::uint32_t incarnation = 0;    // of the current / last process
    std::uint32_t starts = 0;         // processes started in this supervisor
    std::uint32_t restarts = 0;       // processes started after the first
    RestartHistory history;
    std::optional<ExitReason> last_exit;
    Clock::time_point started{};      // of the current process
    Clock::time_point next_start{};   // when Restarting
    bool restart_requested = false;   // `hsring restart`: start again as soon as it ended
    std::optional<Clock::time_point> kill_at;  // SIGTERM sent: SIGKILL at this time
    WorkerOutput output;

    bool alive() const { return pid > 0; }
};

} // namespace hsring::supervisor
