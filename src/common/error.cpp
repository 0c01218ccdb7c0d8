#include "hsring/error.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hsring {

std::string errno_text(int err) { return fmt::format("{} ({})", std::strerror(err), err); }

void assert_failed(const char* expr, const char* file, int line, const std::string& msg) {
    std::fprintf(stderr, "hsring: internal error (a bug, please report): %s:%d: %s %s\n", file,
                 line, expr, msg.c_str());
    std::fflush(stderr);
    std::abort();
}

} // namespace hsring
