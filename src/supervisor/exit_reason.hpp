#pragma once
// Why a worker process ended, from its wait status, in words for logs and status.
#include "hsring/worker_contract.hpp"

#include <filesystem>
#include <string>
#include <string_view>

namespace hsring::supervisor {

// Exit code 3 of a worker: a user error (bad config, data, model) that a restart cannot fix
// (src/worker/CONTRACT.md).
inline constexpr int kFatalExitCode = exit_code::kUserError;

struct ExitReason {
    int code = -1;     // exit code, or -1 when killed by a signal
    int signal = 0;    // the signal that killed it, or 0
    bool core = false;

    static ExitReason from_wait_status(int status);
    // Exit codes 4 and 5 are a drafter gang's orderly stop at a checkpoint, not failures.
    bool failed() const { return code != exit_code::kOk && code != exit_code::kGangStopped && code != exit_code::kGangRestart; }
    bool fatal() const { return code == kFatalExitCode; }
    // "exit code 1", "killed by SIGKILL", "killed by SIGSEGV (core dumped)"
    std::string str() const;
};

// "SIGKILL" (or "signal 42" for one without a name).
std::string signal_name(int sig);

// What a worker that stopped the run said: the message of the last error line (hsring's log
// format "HH:MM:SS.mmm NAME E message") its log holds since the worker's last start, else
// `fallback` (its last stderr line). A library may print more after hsring's error (torch's
// warnings at exit, the frames of a C++ backtrace): the error line is the one a person needs.
std::string last_error_message(const std::filesystem::path& worker_log, std::string_view worker,
                               std::string_view fallback);
// The same over the log's text (the part that matters: its end).
std::string last_error_message_in(std::string_view log_text, std::string_view worker, std::string_view fallback);

} // namespace hsring::supervisor
