// hsring ledger verify RUN_DIR [RUN_DIR ...]: is every sample in the drafter's latest checkpoint
// exactly once per epoch? Independent of the shared-memory ledger: it replays every drafter
// rank's train log against the checkpoint step (include/hsring/train_log.hpp), with the data
// set facts from run.json. A run of several machines is verified over all their run dirs
// together (each one holds its machine's train logs and share of the data).
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "hsring/error.hpp"
#include "hsring/train_log.hpp"
#include "supervisor/run_verify.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace hsring::cli {

int ledger(Args args) {
    constexpr const char* kUsage =
        "usage: hsring ledger verify RUN_DIR [RUN_DIR ...]\n"
        "  per epoch: samples trained exactly once, rejected (their target found non-finite hidden states:\n"
        "  never trained), missing, more than once, in the weights of the latest checkpoint\n"
        "  (RUN_DIR/checkpoints/latest, RUN_DIR/train-log.<rank>.txt); a run of several machines needs every\n"
        "  machine's run dir. Exit 0 ok; 1 a sample trained more than once, or missing from a run that\n"
        "  completed; 3 the run has not completed (samples not trained yet, none twice)\n";
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

    std::vector<std::filesystem::path> dirs(p.positional.begin() + 1, p.positional.end());
    const supervisor::RunVerification v = supervisor::verify_run_dirs(dirs);
    const auto& machines = v.machines;
    const supervisor::RunRecord& first = machines.begin()->second.second;
    const LineageReport& r = v.report;

    if (machines.size() == 1)
        fmt::print("run dir {}: checkpoint step {}, {} incarnations, {} train records, {} in the weights\n",
                   machines.begin()->second.first.dir.string(), r.final_step, r.incarnations, r.records, r.surviving);
    else
        fmt::print("{} machines ({} train logs): checkpoint step {}, {} incarnations, {} train records, {} in the "
                   "weights\n", machines.size(), v.logs, r.final_step, r.incarnations, r.records, r.surviving);
    fmt::print("  {:>5}  {:>10}  {:>14}  {:>10}  {:>10}  {:>16}\n", "EPOCH", "TOTAL", "EXACTLY ONCE", "REJECTED",
               "MISSING", "MORE THAN ONCE");
    for (std::size_t e = 0; e < r.epochs.size(); ++e) {
        const EpochReport& er = r.epochs[e];
        fmt::print("  {:>5}  {:>10}  {:>14}  {:>10}  {:>10}  {:>16}\n", e, er.total, er.exactly_once, er.rejected,
                   er.missing, er.more_than_once);
    }
    if (r.ok()) {
        if (r.rejected())
            fmt::print("ok: every sample is in the weights exactly once per epoch, except {} sample passes rejected by "
                       "their target (non-finite hidden states: never trained; the targets' logs name them)\n",
                       r.rejected());
        else
            fmt::print("ok: every sample is in the weights exactly once per epoch\n");
        return 0;
    }
    // A run that has not finished (stopped, still running, or [train] max_steps) misses what it has
    // not trained yet: that is no loss. Trained twice is always a failure.
    const bool finished = v.finished;
    if (!finished && r.doubled() == 0) {
        if (first.max_steps && first.end && first.end->complete)
            fmt::print("not finished: {} sample passes are not in the weights, none is in them more than once ([train] "
                       "max_steps = {} ended the run before every epoch)\n", r.missing(), first.max_steps);
        else
            fmt::print("not finished: {} sample passes are not in the weights yet, none is in them more than once (the "
                       "run has not completed; `hsring run` resumes it)\n", r.missing());
        return 3;
    }
    fmt::print("FAILED: {} sample passes are missing, {} are trained more than once\n", r.missing(), r.doubled());
    return 1;
}

} // namespace hsring::cli
