#pragma once
// The supervisor's own output. On a terminal: one status line at the bottom, redrawn in place,
// with worker lines ("[target.0] ...") and supervisor messages printed above it (the line is
// cleared, the text written, the line drawn again). Not on a terminal: plain lines only, the
// status as a periodic line of its own.
//
// Worker lines and status go to stdout; the supervisor's messages go through hsring::log to
// stderr like every other hsring program's.
//
// Thread-safety: one thread (the supervisor's loop).
#include "hsring/log.hpp"

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace hsring::supervisor {

class Console {
public:
    Console();
    bool tty() const { return tty_; }

    void worker_line(std::string_view worker, std::string_view line);
    void message(log::Level level, std::string_view text);
    template <typename... A> void info(fmt::format_string<A...> f, A&&... a) {
        message(log::Level::Info, fmt::format(f, std::forward<A>(a)...));
    }
    template <typename... A> void warn(fmt::format_string<A...> f, A&&... a) {
        message(log::Level::Warn, fmt::format(f, std::forward<A>(a)...));
    }
    template <typename... A> void error(fmt::format_string<A...> f, A&&... a) {
        message(log::Level::Error, fmt::format(f, std::forward<A>(a)...));
    }
    // Plain text to stdout (the final summary).
    void print(std::string_view text);

    // A new status: redrawn in place on a terminal, printed as a line otherwise.
    void status(std::string status_line);
    // Removes the status line from the terminal while something else may write to it (library
    // code logging to stderr); the next status() or redraw() brings it back.
    void hide();
    void redraw();
    // Removes the status line for good (the run is over).
    void finish();
    int width() const;

private:
    void write_out(std::string_view s);
    bool tty_ = false;
    bool err_tty_ = false;
    bool shown_ = false;
    std::string status_;
};

} // namespace hsring::supervisor
