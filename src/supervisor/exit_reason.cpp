// Exit reasons (see exit_reason.hpp).
#include "supervisor/exit_reason.hpp"

#include <sys/wait.h>

#include <fmt/format.h>

#include <cstring>

namespace hsring::supervisor {

ExitReason ExitReason::from_wait_status(int status) {
    ExitReason r;
    if (WIFEXITED(status)) {
        r.code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        r.signal = WTERMSIG(status);
        r.core = WCOREDUMP(status);
    }
    return r;
}

std::string ExitReason::str() const {
    if (signal) return fmt::format("killed by {}{}", signal_name(signal), core ? " (core dumped)" : "");
    return fmt::format("exit code {}", code);
}

std::string signal_name(int sig) {
    if (const char* abbrev = ::sigabbrev_np(sig)) return std::string("SIG") + abbrev;
    return fmt::format("signal {}", sig);
}

} // namespace hsring::supervisor
