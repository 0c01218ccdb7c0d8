// c10d errors as hsring reports them: one line, no C++ backtrace. c10::Error::what() carries the
// backtrace (a line "Exception raised from ..." and a "frame #N" line per frame); a worker that
// put it into its message ended with a frame or a lone ")" as its last stderr line, which the
// supervisor repeated ("drafter.0 stopped the run with a user error (exit code 3): )").
#include "distributed/error_text.hpp"
#include "hsring/error.hpp"
#include "worker/core/worker_env.hpp"

#include <c10/util/Exception.h>
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace hsring;

namespace {

c10::Error c10_error() {
    try {
        TORCH_CHECK(false, "The client socket has timed out after 3000ms while trying to connect to (127.0.0.1, 29769).");
    } catch (const c10::Error& e) {
        return e;
    }
    std::abort();  // TORCH_CHECK(false, ...) always throws
}

// stderr of `body` run by the worker's error path, and its exit code.
std::pair<std::string, int> run_worker(int (*body)(int, char**)) {
    const auto file = std::filesystem::temp_directory_path() / fmt::format("hsring-errtext-{}", ::getpid());
    std::fflush(stderr);
    const int saved = ::dup(STDERR_FILENO);
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, STDERR_FILENO);
    ::close(fd);
    char name[] = "hsring-drafter";
    char* argv[] = {name, nullptr};
    const int rc = worker::run_guarded("hsring-drafter", body, 1, argv);
    std::fflush(stderr);
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
    std::ifstream in(file);
    std::stringstream ss;
    ss << in.rdbuf();
    std::filesystem::remove(file);
    return {ss.str(), rc};
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
}

} // namespace

TEST_CASE("a c10 error's text is its message on one line, without the backtrace") {
    const c10::Error e = c10_error();
    REQUIRE(std::string(e.what()).find("frame #") != std::string::npos);  // what() has it
    const std::string t = distributed::error_text(e);
    CHECK(t.find("The client socket has timed out after 3000ms") == 0);
    CHECK(t.find('\n') == std::string::npos);
    CHECK(t.find("frame #") == std::string::npos);
    CHECK(distributed::error_text(std::runtime_error("a\n  b")) == "a; b");
}

TEST_CASE("a user error that embeds a c10 error: the worker's last stderr line is the whole message") {
    // As the rendezvous wrote it before: fail("...({})", e.what()) with the backtrace inside.
    auto [err, rc] = run_worker([](int, char**) -> int {
        fail("cannot reach the master 127.0.0.1:29769 within 15 s ([distributed] timeout_s): is `hsring run` "
             "running on machine 0? ({})", c10_error().what());
    });
    CHECK(rc == worker::kExitUserError);
    const auto lines = lines_of(err);
    REQUIRE(lines.size() == 1);  // a user error: no backtrace at all
    CHECK(lines.back().find(" E cannot reach the master 127.0.0.1:29769 within 15 s") != std::string::npos);
    CHECK(lines.back().ends_with("(The client socket has timed out after 3000ms while trying to connect to "
                                 "(127.0.0.1, 29769).)"));
}

TEST_CASE("a failure that is not the user's keeps its backtrace in the log, above the one-line message") {
    auto [err, rc] = run_worker([](int, char**) -> int { throw c10_error(); });
    CHECK(rc == worker::kExitFailure);
    const auto lines = lines_of(err);
    REQUIRE(lines.size() > 2);
    CHECK(lines.front().find(" W where it failed (C++ backtrace):") != std::string::npos);
    CHECK(err.find("frame #0") != std::string::npos);
    CHECK(lines.back().find(" E hsring-drafter failed: The client socket has timed out after 3000ms") != std::string::npos);
    CHECK(lines.back().find("frame #") == std::string::npos);
}
