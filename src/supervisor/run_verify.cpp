// `hsring ledger verify` as a function (see run_verify.hpp).
#include "supervisor/run_verify.hpp"

#include "hsring/error.hpp"

#include <algorithm>
#include <cstdint>

namespace hsring::supervisor {

RunVerification verify_run_dirs(const std::vector<std::filesystem::path>& dirs) {
    if (dirs.empty()) fail("no run directory to verify");
    RunVerification v;
    // Every machine's run dir, by node rank.
    auto& machines = v.machines;
    for (const auto& dir : dirs) {
        RunFiles files{std::filesystem::absolute(dir)};
        RunRecord record = read_run_record(files.run_json());
        if (!machines.emplace(record.node_rank, std::pair{files, record}).second)
            fail("{} and {} are both machine {} of the run: give each machine's run dir once", files.dir.string(),
                 machines.at(record.node_rank).first.dir.string(), record.node_rank);
    }
    const RunRecord& first = machines.begin()->second.second;
    const std::uint32_t nnodes = first.nnodes;
    for (const auto& [node, m] : machines) {
        const RunRecord& r = m.second;
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
        const auto s = read_latest_checkpoint(m.first);
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
    v.logs = logs.size();
    v.report = verify_lineage(logs, step, first.samples, first.epochs, first.seed, first.shuffle);
    v.finished = std::all_of(machines.begin(), machines.end(), [](const auto& m) {
        const RunRecord& rec = m.second.second;
        return rec.end && rec.end->complete && rec.max_steps == 0;
    });
    return v;
}

} // namespace hsring::supervisor
