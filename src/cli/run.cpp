// hsring run CONFIG.toml [--run-dir DIR] [--fresh]: the supervisor (src/supervisor/).
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "supervisor/supervisor.hpp"

#include <fmt/format.h>

namespace hsring::cli {

int run(Args args) {
    constexpr const char* kUsage =
        "usage: hsring run CONFIG.toml [--run-dir DIR] [--fresh] [--node-rank N]\n"
        "  --run-dir DIR  the run directory (default [run] run_dir, else runs/<name>)\n"
        "  --fresh        remove an existing ring and ledger of this run first (a different layout or data\n"
        "                 set is refused without it; the checkpoint and train log are kept)\n"
        "  --node-rank N  this machine's place in a run of several machines (overrides NODE_RANK and\n"
        "                 [distributed] node_rank; MASTER_ADDR, MASTER_PORT, NNODES override the file too)\n";
    ParsedArgs p;
    try {
        p = parse_args(args.subspan(1), {"--run-dir", "--node-rank"}, {"--fresh", "--help"});
    } catch (const UsageError& e) {
        fmt::print(stderr, "hsring run: {}\n{}", e.message, kUsage);
        return 2;
    }
    if (p.flag("--help")) {
        fmt::print("{}", kUsage);
        return 0;
    }
    if (p.positional.size() != 1) {
        fmt::print(stderr, "{}", kUsage);
        return 2;
    }
    supervisor::RunOptions opts;
    opts.config = p.positional[0];
    if (auto d = p.value("--run-dir")) opts.run_dir = *d;
    opts.fresh = p.flag("--fresh");
    if (auto n = p.value("--node-rank")) opts.node_rank = *n;
    supervisor::Supervisor sup(opts);
    return sup.run();
}

} // namespace hsring::cli
