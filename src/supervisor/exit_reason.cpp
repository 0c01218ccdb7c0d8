// Exit reasons (see exit_reason.hpp).
#include "supervisor/exit_reason.hpp"

#include "hsring/safe_file.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

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

std::string last_error_message_in(std::string_view log, std::string_view worker, std::string_view fallback) {
    // Only this process's lines: after the supervisor's last "--- hsring: NAME started" note.
    const std::string started = fmt::format("--- hsring: {} started", worker);
    if (const std::size_t s = log.rfind(started); s != std::string_view::npos) log.remove_prefix(s);
    const std::string tag = fmt::format(" {} E ", worker);
    std::string_view found;
    for (std::size_t start = 0; start < log.size();) {
        std::size_t end = log.find('\n', start);
        if (end == std::string_view::npos) end = log.size();
        const std::string_view line = log.substr(start, end - start);
        start = end + 1;
        // "12:03:04.123 drafter.0 E message": the tag right after the 12-character time.
        if (line.size() > 12 + tag.size() && line[2] == ':' && line[8] == '.' && line.substr(12, tag.size()) == tag)
            found = line.substr(12 + tag.size());
    }
    return std::string(found.empty() ? fallback : found);
}

std::string last_error_message(const std::filesystem::path& worker_log, std::string_view worker,
                               std::string_view fallback) {
    try {
        const safe::Fd fd = safe::open_file(worker_log, O_RDONLY);
        if (!fd) return std::string(fallback);
        // The end of the log is enough: the error is among a process's last lines.
        constexpr off_t kTail = 256 * 1024;
        const off_t size = ::lseek(fd.get(), 0, SEEK_END);
        const off_t from = size > kTail ? size - kTail : 0;
        std::string text(static_cast<std::size_t>(size - from), '\0');
        const ssize_t n = size > 0 ? ::pread(fd.get(), text.data(), text.size(), from) : 0;
        text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
        return last_error_message_in(text, worker, fallback);
    } catch (const std::exception&) {
        return std::string(fallback);  // a log we cannot read: the line we have
    }
}

} // namespace hsring::supervisor
