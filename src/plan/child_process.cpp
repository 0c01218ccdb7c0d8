// fork + exec with two pipes and a deadline (see child_process.hpp).
#include "plan/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace hsring::plan {

ChildResult run_child(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
                      double timeout_s, bool echo_stderr) {
    ChildResult r;
    if (argv.empty()) {
        r.error = "no program";
        return r;
    }
    int out[2], err[2], status_pipe[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 || ::pipe2(status_pipe, O_CLOEXEC) != 0) {
        r.error = std::string("pipe: ") + std::strerror(errno);
        return r;
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
        r.error = std::string("fork: ") + std::strerror(errno);
        for (int fd : {out[0], out[1], err[0], err[1], status_pipe[0], status_pipe[1]}) ::close(fd);
        return r;
    }
    if (pid == 0) {
        // Child: only async-signal-safe calls until exec.
        ::dup2(out[1], STDOUT_FILENO);
        ::dup2(err[1], STDERR_FILENO);
        const int devnull = ::open("/dev/null", O_RDONLY);
        if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
        for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
        ::execvp(args[0], args.data());
        const int e = errno;
        (void)!::write(status_pipe[1], &e, sizeof e);
        ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    ::close(status_pipe[1]);
    int exec_errno = 0;
    if (::read(status_pipe[0], &exec_errno, sizeof exec_errno) == sizeof exec_errno) {
        ::close(status_pipe[0]);
        ::close(out[0]);
        ::close(err[0]);
        ::waitpid(pid, nullptr, 0);
        r.error = std::strerror(exec_errno);
        return r;
    }
    ::close(status_pipe[0]);
    r.started = true;

    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    int open_fds = 2;
    char buf[65536];
    while (open_fds > 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            r.timed_out = true;
            ::kill(pid, SIGKILL);
            break;
        }
        const int n = ::poll(fds, 2, static_cast<int>(std::min<long long>(left.count(), 1000)));
        if (n < 0 && errno != EINTR) break;
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
            if (got <= 0) {
                ::close(fds[i].fd);
                fds[i].fd = -1;
                --open_fds;
                continue;
            }
            (i == 0 ? r.output : r.errors).append(buf, static_cast<std::size_t>(got));
            if (i == 1 && echo_stderr) (void)!::write(STDERR_FILENO, buf, static_cast<std::size_t>(got));
        }
    }
    for (auto& f : fds)
        if (f.fd >= 0) ::close(f.fd);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    return r;
}

} // namespace hsring::plan
