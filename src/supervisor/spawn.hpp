#pragma once
// fork + exec of one worker process (invariant 5, docs/architecture.md: the supervisor never initialises
// CUDA; a worker is a fresh program, not a fork of a CUDA-initialised process).
//
// In the child, before exec (src/worker/CONTRACT.md):
//   - its own process group, so a terminal's Ctrl-C reaches only the supervisor, which turns it
//     into a graceful stop through the ring rather than a signal in the middle of every worker;
//   - PR_SET_PDEATHSIG = SIGTERM, then a check that the parent is still the supervisor (it may
//     have died between fork and prctl): a dead supervisor stops its workers cleanly;
//   - an empty signal mask (the supervisor blocks signals for its signalfd; the mask would be
//     inherited through exec and the worker would never see SIGTERM);
//   - SIGPIPE ignored (inherited through exec): when the supervisor dies, nobody reads the
//     worker's output pipes any more, and its next log line must not kill it in the middle of
//     the unit of work it is finishing (lines written then are lost, the work is not);
//   - stdin from /dev/null, stdout and stderr to two pipes read by the supervisor, every other
//     descriptor closed.
// An exec failure is reported back through a close-on-exec pipe, so spawn() throws it.
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace hsring::supervisor {

struct SpawnSpec {
    std::filesystem::path program;
    std::vector<std::string> argv;  // argv[0] included
    std::vector<std::pair<std::string, std::string>> env;  // set on top of the supervisor's environment
};

struct Spawned {
    pid_t pid = 0;
    int out_fd = -1;  // read ends, non-blocking, close-on-exec
    int err_fd = -1;
};

// Throws hsring::Error (fork, pipe or exec failure, with the program's path).
Spawned spawn(const SpawnSpec& spec);

} // namespace hsring::supervisor
