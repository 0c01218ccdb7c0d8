// hsring ledger verify RUN_DIR [RUN_DIR ...]: is every sample in the drafter's latest checkpoint
// exactly once per epoch? Independent of the shared-memory ledger: it replays every drafter
// rank's train log against the checkpoint step (include/hsring/train_log.hpp), with the data
// set facts from run.json. A run of several machines is verified over all their run dirs
// together (each one holds its machine's train logs and share of the data).
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "hsring/error.hpp"
#include "hsring/train_log.hpp"
#include "supervisor/run_files.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace hsring::cli {

int ledger(Args args) {
    constexpr const char* kUsage =
        "usage: hsring ledger verify RUN_DIR [RUN_DIR ...]\n"
        "  per epoch: samples trained exactly once, missing, more than once, in the weights of the latest\n"
        "  checkpoint (RUN_DIR/checkpoints/latest, RUN_DIR/train-log.<rank>.txt); a run of several machines\n"
        "  needs every machine's run dir; exit 1 on any missing or doubled\n";
    ParsedArgs p;
    try {
        p = parse_args(args.subspan(1), {}, {"--help"});
    } catch (const UsageError& e) {
        fmt::print(stderr, "hsring ledger: {}\n{}", e.message, kUsage);
        return 2;
    }
    if (p.flag("--help")) {
        fmt::print("{}", kUsage);
        return 0;
    }
    if (p.positional.size() < 2 || p.positional[0] != "verify") {
        fmt::print(stderr, "{}", kUsage);
        return 2;
    }

    // Every machine's run dir, by node rank.
    std::map<std::uint32_t, std::pair<supervisor::RunFiles, supervisor::RunRecord>> machines;
    for (std::size_t i = 1; i < p.positional.size(); ++i) {
        supervisor::RunFiles files{std::filesystem::absolute(p.positional[i])};
        supervisor::RunRecord record = supervisor::read_run_record(files.run_json());
        if (!machines.emplace(record.node_rank, std::pair{files, record}).second)
            fail("{} and {} are both machine {} of the run: give each machine's run dir once", files.dir.string(),
                 machines.at(record.node_rank).first.dir.string(), record.node_rank);
    }
    const supervisor::RunRecord& first = machines.begin()->second.second;
    const std::uint32_t nnodes = first.nnodes;
    for (const auto& [node, m] : machines) {
        const supervisor::RunRecord& r = m.second;
        if (r.nnodes != nnodes || r.fingerprint != first.fingerprint || r.samples != first.samples ||
            r.epochs != first.epochs || r.seed != first.seed || r.shuffle != first.shuffle)
            fail("{} belongs to another run than {} (machines, data set, epochs, seed or shuffle differ)",
                 m.first.dir.string(), machines.begin()->second.first.dir.string());
    }
    std::string missing;
    for (std::uint32_t n = 0; n < nnodes; ++n)
        if (!machines.count(n)) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", n);
    if (!missing.empty())
        fail("the run has {} machines; the run dirs of machine(s) {} are missing: pass every machine's run dir "
             "(hsring ledger verify DIR0 DIR1 ...)", nnodes, missing);

    // The weights are the master's; every machine records the steps it saw committed. The oldest
    // of them is what every machine has (a machine that died right after a commit is one behind).
    std::uint64_t step = UINT64_MAX;
    for (const auto& [node, m] : machines) {
        const auto s = supervisor::read_latest_checkpoint(m.first);
        if (!s)
            fail("{} has no checkpoint ({} is missing): nothing is trained yet", m.first.dir.string(),
                 m.first.latest_checkpoint().string());
        step = std::min(step, *s);
    }
    std::vector<LogOfMachine> logs;
    for (const auto& [node, m] : machines) {
        for (std::uint32_t rank = 0; rank < m.second.drafters; ++rank) {
            const auto log = m.first.train_log(rank);
            if (!std::filesystem::exists(log))
                fail("{} is missing: drafter rank {} writes it (is {} a run directory?)", log.string(), rank,
                     m.first.dir.string());
            logs.push_back({log, rank, nnodes, node});
        }
    }
    const LineageReport r = verify_lineage(logs, step, first.samples, first.epochs, first.seed, first.shuffle);

    if (machines.size() == 1)
        fmt::print("run dir {}: checkpoint step {}, {} incarnations, {} train records, {} in the weights\n",
                   machines.begin()->second.first.dir.string(), r.final_step, r.incarnations, r.records, r.surviving);
    else
        fmt::print("{} machines ({} train logs): checkpoint step {}, {} incarnations, {} train records, {} in the "
                   "weights\n", machines.size(), logs.size(), r.final_step, r.incarnations, r.records, r.surviving);
    fmt::print("  {:>5}  {:>10}  {:>14}  {:>10}  {:>16}\n", "EPOCH", "TOTAL", "EXACTLY ONCE", "MISSING", "MORE THAN ONCE");
    for (std::size_t e = 0; e < r.epochs.size(); ++e) {
        const EpochReport& er = r.epochs[e];
        fmt::print("  {:>5}  {:>10}  {:>14}  {:>10}  {:>16}\n", e, er.total, er.exactly_once, er.missing, er.more_than_once);
    }
    if (r.ok()) {
        fmt::print("ok: every sample is in the weights exactly once per epoch\n");
        return 0;
    }
    fmt::print("FAILED: samples are missing or trained more than once\n");
    return 1;
}

} // namespace hsring::cli
