// hsring ledger verify RUN_DIR: is every sample in the drafter's latest checkpoint exactly once
// per epoch? Independent of the shared-memory ledger: it replays the train log against the
// checkpoint step (include/hsring/train_log.hpp), with the data set facts from run.json.
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "hsring/error.hpp"
#include "hsring/train_log.hpp"
#include "supervisor/run_files.hpp"

#include <fmt/format.h>

namespace hsring::cli {

int ledger(Args args) {
    constexpr const char* kUsage =
        "usage: hsring ledger verify RUN_DIR\n"
        "  per epoch: samples trained exactly once, missing, more than once, in the weights of the latest\n"
        "  checkpoint (RUN_DIR/checkpoints/latest, RUN_DIR/train-log.0.txt); exit 1 on any missing or doubled\n";
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
    if (p.positional.size() != 2 || p.positional[0] != "verify") {
        fmt::print(stderr, "{}", kUsage);
        return 2;
    }
    supervisor::RunFiles files{std::filesystem::absolute(p.positional[1])};
    const supervisor::RunRecord record = supervisor::read_run_record(files.run_json());
    const auto step = supervisor::read_latest_checkpoint(files);
    if (!step) fail("{} has no checkpoint ({} is missing): nothing is trained yet", files.dir.string(), files.latest_checkpoint().string());
    const auto log = files.train_log(0);
    if (!std::filesystem::exists(log)) fail("{} is missing: the drafter writes it (is {} a run directory?)", log.string(), files.dir.string());
    const LedgerInfo info = record.ledger_info();
    const LineageReport r = verify_lineage(log, *step, info);

    fmt::print("run dir {}: checkpoint step {}, {} incarnations, {} train records, {} in the weights\n",
               files.dir.string(), r.final_step, r.incarnations, r.records, r.surviving);
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
