#pragma once
// SIGCHLD, SIGINT, SIGTERM and SIGHUP as readable events of a signalfd, so the supervisor
// handles them in its poll() loop like any other input: no handler runs between two lines of
// its bookkeeping. The signals are blocked for the process (spawn() unblocks them in children);
// SIGPIPE is ignored (a control client may hang up before its reply).
#include <vector>

namespace hsring::supervisor {

class SignalEvents {
public:
    SignalEvents();
    ~SignalEvents();
    SignalEvents(const SignalEvents&) = delete;
    SignalEvents& operator=(const SignalEvents&) = delete;

    int fd() const { return fd_; }
    // The signals that arrived (several of one kind may be merged into one).
    std::vector<int> read();

private:
    int fd_ = -1;
};

} // namespace hsring::supervisor
