#pragma once
// A profiler trace of a few calls of a step (a benchmark's training step, a short generate or
// spec-decode run): LibTorch's Kineto profiler (CPU ops and, on CUDA, every kernel with its
// time), saved as a Chrome trace (chrome://tracing, Perfetto).
// bench/gpu/trace_summary.py sums its kernels by kind.
#include <functional>
#include <string>

namespace hsring::model {

// Runs `step` `calls` times with the profiler on (the device synchronised before and after) and
// writes the trace to `path`. Throws hsring::Error when the file cannot be written.
void write_kineto_trace(const std::string& path, bool cuda, int calls, const std::function<void()>& step);

} // namespace hsring::model
