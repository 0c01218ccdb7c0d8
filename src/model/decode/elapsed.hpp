#pragma once
// Seconds since a steady-clock time point: the decode engine's timings (generate, spec_decode).
#include <chrono>

namespace hsring::model {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

} // namespace hsring::model
