#pragma once
// Errors at component boundaries. A user error (bad TOML, bad data, missing huge pages) is an
// hsring::Error whose message names the file/key/line and the fix; a broken invariant of ours is
// HSRING_ASSERT (aborts with location), never something a user can cause.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace hsring {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// An error that restarting cannot fix whenever it happens (an unwritable checkpoint directory):
// a worker exits 3 for it even after it started (see src/worker/core/worker_env.hpp run_guarded).
class UserError : public Error {
public:
    using Error::Error;
};

// Throws hsring::Error with a formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
    throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// "what failed: strerror(errno)" for a failed system call.
std::string errno_text(int err);

[[noreturn]] void assert_failed(const char* expr, const char* file, int line, const std::string& msg);

} // namespace hsring

// A bug check: our invariant, not the caller's input.
#define HSRING_ASSERT(cond, ...)                                                                   \
    do {                                                                                           \
        if (!(cond)) [[unlikely]]                                                                  \
            ::hsring::assert_failed(#cond, __FILE__, __LINE__, ::fmt::format("" __VA_ARGS__));     \
    } while (0)
