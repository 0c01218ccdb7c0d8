// The supervisor's output (see console.hpp).
#include "supervisor/console.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>

namespace hsring::supervisor {

namespace {
constexpr std::string_view kClearLine = "\r\033[K";
}

Console::Console() : tty_(::isatty(STDOUT_FILENO) == 1), err_tty_(::isatty(STDERR_FILENO) == 1) {}

void Console::write_out(std::string_view s) {
    while (!s.empty()) {
        const ssize_t n = ::write(STDOUT_FILENO, s.data(), s.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            return;  // stdout gone (closed pipe): the logs in RUN_DIR still have everything
        }
        s.remove_prefix(static_cast<std::size_t>(n));
    }
}

int Console::width() const {
    winsize ws{};
    if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return 120;
}

void Console::hide() {
    if (tty_ && shown_) write_out(kClearLine);
    shown_ = false;
}

void Console::redraw() {
    if (!tty_ || status_.empty()) return;
    std::string s(kClearLine);
    // One terminal row: a wrapped status line could not be cleared with \r.
    const std::size_t w = static_cast<std::size_t>(std::max(10, width() - 1));
    s += status_.size() > w ? status_.substr(0, w) : status_;
    write_out(s);
    shown_ = true;
}

void Console::worker_line(std::string_view worker, std::string_view line) {
    hide();
    write_out(fmt::format("[{}] {}\n", worker, line));
    redraw();
}

void Console::message(log::Level level, std::string_view text) {
    if (!log::enabled(level)) return;
    if (err_tty_) hide();
    log::write(level, text);
    if (err_tty_) redraw();
}

void Console::print(std::string_view text) {
    hide();
    write_out(text);
    redraw();
}

void Console::finish() {
    hide();
    status_.clear();
}

void Console::status(std::string line) {
    status_ = std::move(line);
    if (tty_) redraw();
    else write_out(status_ + "\n");
}

} // namespace hsring::supervisor
