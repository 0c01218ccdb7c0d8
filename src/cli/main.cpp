// The `hsring` command. It links neither torch nor CUDA (invariant 5, docs/architecture.md): commands that
// need a model exec the matching worker program instead.
#include "cli/commands.hpp"
#include "hsring/error.hpp"

#include <fmt/format.h>

#include <cstring>
#include <exception>
#include <string_view>

namespace {

struct Command {
    const char* name;
    int (*run)(hsring::cli::Args);
    const char* synopsis;
    const char* help;
};

const Command kCommands[] = {
    {"config", hsring::cli::config_check, "config check FILE", "validate a config, print derived sizes"},
    {"plan", hsring::cli::plan, "plan CONFIG [--gpu-mem S] [--measure]", "predicted memory per GPU/host, what fits, the GPU split"},
    {"run", hsring::cli::run, "run CONFIG [--run-dir DIR] [--fresh]", "run the supervisor and its workers"},
    {"status", hsring::cli::status, "status [--json]", "a run's workers, ring, ledger and rates"},
    {"restart", hsring::cli::restart_or_kill, "restart WORKER", "stop a worker gracefully and start it again"},
    {"kill", hsring::cli::restart_or_kill, "kill WORKER", "SIGKILL a worker (a drill: the restart policy applies)"},
    {"stop", hsring::cli::stop, "stop [--now]", "stop the run (graceful; --now: SIGKILL, keep the ring)"},
    {"ring", hsring::cli::ring, "ring rm NAME [--force]", "remove a ring, its ledger and status board"},
    {"ledger", hsring::cli::ledger, "ledger verify RUN_DIR", "exactly-once check of the latest checkpoint"},
    {"drill", hsring::cli::drill, "drill CONFIG [--faults N] [--seed S]",
     "kill, stop and fault-inject a real run; verify nothing is lost or doubled"},
    {"model", hsring::cli::model, "model dump-hidden|check-drafter|generate|spec-decode ...",
     "target layers to safetensors; evaluate an exported drafter; generate with the target (hsring-model)"},
    {"data", hsring::cli::data, "data generate CONFIG --out FILE.jsonl",
     "the target answers the data set's prompts: its own responses as training data (hsring-model)"},
};

void usage() {
    fmt::print(stderr, "usage: hsring COMMAND ...\n\ncommands:\n");
    for (const auto& c : kCommands) fmt::print(stderr, "  {:<38} {}\n", c.synopsis, c.help);
    fmt::print(stderr, "\nstatus, restart, kill and stop take --run-dir DIR (default: the run dir of --config FILE,\n"
                       "else the current directory). `hsring COMMAND --help` says more.\n");
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
        usage();
        return argc < 2 ? 2 : 0;
    }
    for (const auto& c : kCommands) {
        if (std::string_view(argv[1]) != c.name) continue;
        try {
            return c.run(hsring::cli::Args(argv + 1, static_cast<std::size_t>(argc - 1)));
        } catch (const hsring::Error& e) {
            fmt::print(stderr, "hsring: {}\n", e.what());
            return 2;
        } catch (const std::exception& e) {
            fmt::print(stderr, "hsring: unexpected error: {}\n", e.what());
            return 3;
        }
    }
    fmt::print(stderr, "hsring: unknown command '{}'\n", argv[1]);
    usage();
    return 2;
}
