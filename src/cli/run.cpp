// hsring run CONFIG.toml [--run-dir DIR] [--fresh]: the supervisor (src/supervisor/).
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "hsring/error.hpp"
#include "plan/capacity.hpp"
#include "supervisor/supervisor.hpp"

#include <fmt/format.h>

namespace hsring::cli {

namespace {

// Every GPU the topology names exists on this machine (nvidia-smi, no CUDA in this process).
void check_gpu_places(const std::filesystem::path& file) {
    const Config cfg = load_config(file);
    int highest = -1;
    std::string who;
    auto scan = [&](const std::vector<Place>& places, const char* role) {
        for (std::size_t i = 0; i < places.size(); ++i)
            if (places[i].gpu > highest) {
                highest = places[i].gpu;
                who = fmt::format("{}.{}", role, i);
            }
    };
    scan(cfg.topology.targets, "target");
    scan(cfg.topology.drafters, "drafter");
    if (highest < 0) return;
    const plan::NvidiaSmi smi = plan::query_nvidia_smi();
    if (smi.memory_bytes.empty()) {
        fmt::print(stderr, "hsring run: warning: cannot check that GPU {} ({}) exists: {}\n", highest, who, smi.error);
        return;
    }
    const auto n = static_cast<int>(smi.memory_bytes.size());
    if (highest >= n)
        fail("{}: [topology] places {} on GPU {}, but this machine has {} GPU{} (0..{}; nvidia-smi): more workers "
             "than places; give every target and drafter an existing GPU (allow_shared_gpus = true shares one)",
             file.string(), who, highest, n, n == 1 ? "" : "s", n - 1);
}

} // namespace

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
    check_gpu_places(opts.config);
    supervisor::Supervisor sup(opts);
    return sup.run();
}

} // namespace hsring::cli
