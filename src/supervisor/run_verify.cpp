// `hsring ledger verify` as a function (see run_verify.hpp).
#include "supervisor/run_verify.hpp"

#include "hsring/error.hpp"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>

namespace hsring::supervisor {

namespace {

// What the run.json files of two machines say differently about the run they belong to, as
// "[data] epochs is 2 in A, 3 in B; ..."; "" when nothing. A field that either file lacks (an
// older hsring) is unknown and not compared. Not compared: [run] name and the master address,
// which differ between machines of one run (two machines on one host need two names; machine
// 0 may reach itself as 127.0.0.1).
std::string run_differences(const RunFiles& af, const RunRecord& a, const RunFiles& bf, const RunRecord& b) {
    std::string out;
    auto differ = [&](std::string_view field, const std::string& va, const std::string& vb) {
        if (va != vb)
            out += fmt::format("{}{} is {} in {}, {} in {}", out.empty() ? "" : "; ", field, va, af.dir.string(), vb,
                               bf.dir.string());
    };
    differ("the number of machines ([distributed] nnodes)", std::to_string(a.nnodes), std::to_string(b.nnodes));
    differ("the data set's fingerprint ([data] path)", fmt::format("{:016x}", a.fingerprint),
           fmt::format("{:016x}", b.fingerprint));
    differ("the data set's samples ([data] path)", std::to_string(a.samples), std::to_string(b.samples));
    differ("[data] epochs", std::to_string(a.epochs), std::to_string(b.epochs));
    differ("[run] seed", std::to_string(a.seed), std::to_string(b.seed));
    differ("[data] shuffle", a.shuffle ? "true" : "false", b.shuffle ? "true" : "false");
    if (a.master_port && b.master_port)
        differ("[distributed] master_port", std::to_string(a.master_port), std::to_string(b.master_port));
    if (a.identity.is_object() && b.identity.is_object()) {
        // Named once: these are compared above, also for an older run.json.
        static const std::set<std::string, std::less<>> kAbove{"[data] fingerprint", "[data] epochs", "[data] shuffle",
                                                               "[run] seed", "[distributed] nnodes"};
        for (const auto& [key, va] : a.identity.items()) {
            const auto vb = b.identity.find(key);
            if (!kAbove.count(key)) differ(key, va.dump(), vb == b.identity.end() ? "missing" : vb->dump());
        }
        for (const auto& [key, vb] : b.identity.items())
            if (!a.identity.contains(key) && !kAbove.count(key)) differ(key, "missing", vb.dump());
    }
    return out;
}

} // namespace

RunVerification verify_run_dirs(const std::vector<std::filesystem::path>& dirs) {
    if (dirs.empty()) fail("no run directory to verify");
    RunVerification v;
    // Every machine's run dir, by node rank.
    auto& machines = v.machines;
    for (const auto& dir : dirs) {
        RunFiles files{std::filesystem::absolute(dir)};
        RunRecord record = read_run_record(files.run_json());
        if (const auto it = machines.find(record.node_rank); it != machines.end()) {
            // Two dirs of one machine: two runs (say how they differ), or one machine's dir twice.
            const auto& [other_files, other] = it->second;
            const std::string why = run_differences(other_files, other, files, record);
            if (!why.empty())
                fail("{} and {} belong to different runs: {}. Verify each run on its own (`hsring ledger verify "
                     "DIR`), or give the run dirs of the machines of one run", other_files.dir.string(),
                     files.dir.string(), why);
            if (record.nnodes == 1)
                fail("{} and {} are two runs of one machine each (of the same data and settings): verify each on its "
                     "own (`hsring ledger verify DIR`)", other_files.dir.string(), files.dir.string());
            fail("{} and {} are both machine {} of the run: give each machine's run dir once", files.dir.string(),
                 other_files.dir.string(), record.node_rank);
        }
        machines.emplace(record.node_rank, std::pair{files, record});
    }
    // Machines of two runs of the same data would otherwise verify as one run: every run.json
    // must describe the same run (run_files.hpp, RunRecord::identity).
    const auto& [first_files, first] = machines.begin()->second;
    const std::uint32_t nnodes = first.nnodes;
    for (const auto& [node, m] : machines) {
        const std::string why = run_differences(first_files, first, m.first, m.second);
        if (!why.empty())
            fail("{} (machine {}) and {} (machine {}) belong to different runs: {}. Give the run dirs of the machines "
                 "of one run", first_files.dir.string(), first.node_rank, m.first.dir.string(), node, why);
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
        // The run's drafter ranks now, and any more an earlier run on this machine had.
        for (std::uint32_t rank = 0; rank < m.second.drafters; ++rank) {
            const auto log = m.first.train_log(rank);
            if (!std::filesystem::exists(log))
                fail("{} is missing: drafter rank {} writes it (is {} a run directory?)", log.string(), rank,
                     m.first.dir.string());
        }
        for (const auto& [rank, log] : train_logs_in(m.first.dir)) logs.push_back({log, rank, nnodes, node});
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
