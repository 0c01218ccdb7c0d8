#pragma once
// Splits the bytes a worker writes to a pipe into lines. A line longer than kMaxLine is cut
// (a worker that prints megabytes without a newline must not grow the supervisor).
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace hsring::supervisor {

class LineReader {
public:
    static constexpr std::size_t kMaxLine = 64 * 1024;
    using OnLine = std::function<void(std::string_view line)>;

    // Reads what the non-blocking `fd` holds now and calls `on_line` for each complete line
    // (without its newline). Returns false at end of file or on a read error (then flush()).
    bool pump(int fd, const OnLine& on_line);
    // Delivers an unterminated last line, if any.
    void flush(const OnLine& on_line);

private:
    std::string buf_;
};

} // namespace hsring::supervisor
