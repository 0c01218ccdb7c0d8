// Pipe output to lines (see line_reader.hpp).
#include "supervisor/line_reader.hpp"

#include <unistd.h>

#include <cerrno>

namespace hsring::supervisor {

bool LineReader::pump(int fd, const OnLine& on_line) {
    char chunk[16384];
    for (;;) {
        const ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n == 0) return false;
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno == EAGAIN || errno == EWOULDBLOCK;
        }
        buf_.append(chunk, static_cast<std::size_t>(n));
        std::size_t start = 0;
        for (std::size_t nl; (nl = buf_.find('\n', start)) != std::string::npos; start = nl + 1) {
            std::string_view line(buf_.data() + start, nl - start);
            if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
            on_line(line);
        }
        buf_.erase(0, start);
        if (buf_.size() > kMaxLine) {
            on_line(std::string_view(buf_).substr(0, kMaxLine));
            buf_.erase(0, kMaxLine);
        }
    }
}

void LineReader::flush(const OnLine& on_line) {
    if (!buf_.empty()) on_line(buf_);
    buf_.clear();
}

} // namespace hsring::supervisor
