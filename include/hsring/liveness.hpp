#pragma once
// Is a process still the one we knew? A pid can be reused, so callers keep its start time
// (/proc/PID/stat field 22) beside it; a zombie counts as dead. Used by the ring's owner table,
// the supervisor (run.json, a previous run's processes) and `hsring ring rm`.
#include <sys/types.h>

#include <cstdint>

namespace hsring {

// Exists, is not a zombie and (if `start_ticks` is known, != 0) started at `start_ticks`.
bool process_alive(pid_t pid, std::uint64_t start_ticks = 0);
std::uint64_t process_start_ticks(pid_t pid);  // 0 if unknown
// Its state letter from /proc/PID/stat ('R', 'S', 'T' stopped by a signal, 'Z', ...); '?' if gone.
char process_state(pid_t pid);

// Sends `sig` to `pid` only if it is still the process that started at `start_ticks` (!= 0): the
// check and the signal go through a pidfd, so a pid reused in between is never signalled. With
// `group`, its process group (the pid leads it) gets the signal too. False if it is gone.
bool signal_process(pid_t pid, std::uint64_t start_ticks, int sig, bool group = false);

} // namespace hsring
