// Signals as events (see signals.hpp).
#include "supervisor/signals.hpp"

#include "hsring/error.hpp"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>

namespace hsring::supervisor {

SignalEvents::SignalEvents() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
    if (::sigprocmask(SIG_BLOCK, &set, nullptr) != 0) fail("sigprocmask: {}", errno_text(errno));
    fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd_ < 0) fail("signalfd: {}", errno_text(errno));
    ::signal(SIGPIPE, SIG_IGN);
}

SignalEvents::~SignalEvents() {
    if (fd_ >= 0) ::close(fd_);
}

std::vector<int> SignalEvents::read() {
    std::vector<int> out;
    signalfd_siginfo info[16];
    for (;;) {
        const ssize_t n = ::read(fd_, info, sizeof info);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        for (std::size_t i = 0; i < static_cast<std::size_t>(n) / sizeof info[0]; ++i)
            out.push_back(static_cast<int>(info[i].ssi_signo));
    }
    return out;
}

} // namespace hsring::supervisor
