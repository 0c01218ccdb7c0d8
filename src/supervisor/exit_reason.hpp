#pragma once
// Why a worker process ended, from its wait status, in words for logs and status.
#include "hsring/worker_contract.hpp"

#include <string>

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

} // namespace hsring::supervisor
