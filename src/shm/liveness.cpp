// Is the process behind an owner token still the one that took the slot? A pid can be reused,
// so the owner table also records the process start time (/proc/PID/stat field 22); a zombie
// (exited, not yet reaped) holds nothing any more and counts as dead.
#include "hsring/liveness.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>

namespace hsring {
namespace {

struct ProcStat {
    bool found = false;
    char state = '?';
    std::uint64_t start_ticks = 0;
};

ProcStat read_stat(pid_t pid) {
    ProcStat s;
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string all;
    if (!std::getline(in, all)) return s;
    // comm (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    auto close = all.rfind(')');
    if (close == std::string::npos || close + 2 >= all.size()) return s;
    std::istringstream rest(all.substr(close + 2));
    std::string field;
    rest >> s.state;                               // field 3
    for (int i = 4; i < 22; ++i) rest >> field;    // fields 4..21
    rest >> s.start_ticks;                         // field 22
    s.found = true;
    return s;
}

} // namespace

std::uint64_t process_start_ticks(pid_t pid) { return read_stat(pid).start_ticks; }

char process_state(pid_t pid) {
    const ProcStat s = read_stat(pid);
    return s.found ? s.state : '?';
}

bool process_alive(pid_t pid, std::uint64_t start_ticks) {
    if (pid <= 0) return false;
    if (::kill(pid, 0) != 0 && errno != EPERM) return false;
    ProcStat s = read_stat(pid);
    if (!s.found) return false;
    if (s.state == 'Z' || s.state == 'X') return false;
    return start_ticks == 0 || s.start_ticks == start_ticks;
}

bool signal_process(pid_t pid, std::uint64_t start_ticks, int sig, bool group) {
    if (pid <= 0 || start_ticks == 0) return false;
    // The pidfd pins the process we open it for; the start time then says whether it is ours.
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) return false;
    bool sent = false;
    if (process_alive(pid, start_ticks)) {
        // Its group first, while the leader (pid == pgid) is known alive: the group id cannot be
        // a new process's then.
        if (group) ::kill(-pid, sig);
        sent = ::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0) == 0;
    }
    ::close(fd);
    return sent;
}

} // namespace hsring
