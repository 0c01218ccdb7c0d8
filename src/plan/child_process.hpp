#pragma once
// Running a helper program and collecting its output: nvidia-smi, and the benchmark programs
// `hsring plan --measure` runs (they link LibTorch and CUDA; `hsring` must not, docs/architecture.md
// invariant 5, so they run as children).
#include <string>
#include <utility>
#include <vector>

namespace hsring::plan {

struct ChildResult {
    bool started = false;  // false: exec failed (error says why)
    std::string error;
    int exit_code = -1;    // -1 when killed by a signal
    int signal = 0;
    bool timed_out = false;
    std::string output;    // stdout
    std::string errors;    // stderr
};

// argv[0] is looked up in $PATH unless it holds a '/'. `env` is set on top of ours. The child is
// killed (SIGKILL) after timeout_s. echo_stderr: copy the child's stderr to ours as it comes
// (progress of a long measurement). Never throws.
ChildResult run_child(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
                      double timeout_s, bool echo_stderr = false);

} // namespace hsring::plan
