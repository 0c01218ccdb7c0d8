// fork + exec of a worker (see spawn.hpp). Between fork and exec the child only makes
// async-signal-safe calls: everything it needs (argv, envp, paths) is built before the fork.
#include "supervisor/spawn.hpp"

#include "hsring/error.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

extern char** environ;

namespace hsring::supervisor {
namespace {

struct Pipe {
    int r = -1, w = -1;
    Pipe() {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) fail("pipe: {}", errno_text(errno));
        r = fds[0];
        w = fds[1];
    }
    ~Pipe() {
        if (r >= 0) ::close(r);
        if (w >= 0) ::close(w);
    }
    int take_r() { return std::exchange(r, -1); }
};

std::vector<std::string> environment_with(const std::vector<std::pair<std::string, std::string>>& overrides) {
    std::map<std::string, std::string> env;
    for (char** e = environ; e && *e; ++e) {
        std::string kv(*e);
        const auto eq = kv.find('=');
        if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    for (const auto& [k, v] : overrides) env[k] = v;
    std::vector<std::string> out;
    for (const auto& [k, v] : env) out.push_back(k + "=" + v);
    return out;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
    std::vector<char*> out;
    for (auto& s : v) out.push_back(s.data());
    out.push_back(nullptr);
    return out;
}

// Child side of the exec-error pipe: report errno and die.
[[noreturn]] void child_fail(int err_w, int err) {
    [[maybe_unused]] auto n = ::write(err_w, &err, sizeof err);
    ::_exit(127);
}

} // namespace

Spawned spawn(const SpawnSpec& spec) {
    std::vector<std::string> argv_s = spec.argv;
    std::vector<std::string> env_s = environment_with(spec.env);
    std::vector<char*> argv = c_strings(argv_s);
    std::vector<char*> envp = c_strings(env_s);
    const std::string program = spec.program.string();

    Pipe out, err, exec_err;
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0) fail("open /dev/null: {}", errno_text(errno));
    const pid_t parent = ::getpid();

    const pid_t pid = ::fork();
    if (pid < 0) {
        const int e = errno;
        ::close(devnull);
        fail("fork for {}: {}", program, errno_text(e));
    }
    if (pid == 0) {
        ::setpgid(0, 0);
        if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) child_fail(exec_err.w, errno);
        if (::getppid() != parent) ::_exit(1);  // the supervisor died before prctl took effect
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        ::signal(SIGPIPE, SIG_IGN);
        if (::dup2(devnull, 0) < 0 || ::dup2(out.w, 1) < 0 || ::dup2(err.w, 2) < 0) child_fail(exec_err.w, errno);
        // Everything else is close-on-exec already; the exec-error pipe must stay open until exec.
        ::execve(program.c_str(), argv.data(), envp.data());
        child_fail(exec_err.w, errno);
    }
    ::close(devnull);
    ::setpgid(pid, pid);  // also in the parent: no race with signals sent to the group right away
    ::close(exec_err.w);
    exec_err.w = -1;
    ::close(out.w);
    out.w = -1;
    ::close(err.w);
    err.w = -1;

    int child_errno = 0;
    ssize_t n;
    do {
        n = ::read(exec_err.r, &child_errno, sizeof child_errno);
    } while (n < 0 && errno == EINTR);
    if (n == sizeof child_errno) {
        // The child exits at once (127); it is reaped by the supervisor's SIGCHLD handling.
        fail("cannot start {}: {}", program, errno_text(child_errno));
    }
    Spawned s;
    s.pid = pid;
    s.out_fd = out.take_r();
    s.err_fd = err.take_r();
    for (int fd : {s.out_fd, s.err_fd}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    return s;
}

} // namespace hsring::supervisor
