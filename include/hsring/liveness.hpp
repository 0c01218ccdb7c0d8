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

} // namespace hsring
