#pragma once
// Seconds since the Unix epoch on the system clock: the time stamps that line up rows written by
// different processes (metrics.jsonl, checkpoints' state.json, TensorBoard events).
#include <chrono>

namespace hsring {

inline double unix_seconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

} // namespace hsring
