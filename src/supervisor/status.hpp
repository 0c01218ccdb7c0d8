#pragma once
// The run's status as one JSON object: what `hsring status [--json]` prints and what the live
// status line shows. Built by the supervisor from its worker table, the ring, the ledger and the status board;
// rendered from the JSON alone, so the CLI and the supervisor show the same thing.
//
//   {"run": {"name", "run_dir", "config", "pid", "phase", "uptime_s", "mode"},
//    "workers": [{"name", "role", "rank", "place", "pid", "state", "restarts", "incarnation",
//                 "last_exit", "log", "samples", "tokens", "samples_per_s", "tokens_per_s",
//                 "step", "loss", "heartbeat_age_s", "holds": {"writing", "reading"}}],
//     (state "suspended": stopped by a signal; its rates are 0 while it does nothing)
//    "ring": {"name", "slots", "free", "writing", "ready", "reading", "stopping",
//             "counters": {"commits", "releases", "aborts", "put_backs", "reclaimed_writing",
//                          "reclaimed_reading", "redeliveries"}},
//    "ledger": {"name", "total", "pending", "in_slot", "consumed", "durable", "rejected", "done"},
//    "rates": {"target": {"samples_per_s", "tokens_per_s", "wait_fraction"}, "drafter": {...}},
//    "balance": {"targets_wait", "drafters_wait", "bottleneck", "advice"},
//    "drafter": {"step", "loss"}}
// wait_fraction: of the workers' time over the last seconds, the part spent waiting (targets: for
// a free slot or pending samples; drafters: for data); "bottleneck" is "drafters" when targets
// wait most of the time and drafters hardly, "targets" the other way round, else "none".
#include "hsring/ledger.hpp"
#include "hsring/ring.hpp"
#include "hsring/status_board.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace hsring::supervisor {

// Per-worker rates from successive WorkerStats, timed by the worker's own heartbeats (it
// publishes about twice a second, whatever the status interval), over the last few seconds.
// Counters start again with each process.
class RateMeter {
public:
    struct Rate {
        double samples_per_s = 0, tokens_per_s = 0;
        double wait_fraction = -1;  // waiting / (waiting + busy) over the window; -1 = not known yet
    };
    static constexpr double kWindowS = 3.0;
    // Feeds the latest stats of `worker`; returns its rate over the window.
    Rate update(const std::string& worker, const WorkerStats& s);
    Rate last(const std::string& worker) const;

private:
    struct Point {
        std::uint64_t heartbeat_ns = 0, samples = 0, tokens = 0, busy_ns = 0, wait_ns = 0;
    };
    struct Track {
        std::int32_t pid = 0;
        std::deque<Point> points;
        Rate rate;
    };
    std::map<std::string, Track> tracks_;
};

struct WorkerStatus {
    std::string name, role, place, state, last_exit, log;
    std::uint32_t rank = 0, restarts = 0, incarnation = 0;
    int pid = 0;
    std::uint32_t writing = 0, reading = 0;  // ring slots its process holds now
    WorkerStats stats;       // from the status board; meaningful when `has_stats`
    bool has_stats = false;  // the current process published stats
    bool suspended = false;  // stopped by a signal (SIGSTOP, Ctrl-Z): alive, but doing nothing
    RateMeter::Rate rate;
};

struct StatusInputs {
    std::string name, run_dir, config, phase, mode;
    int pid = 0;
    double uptime_s = 0;
    std::vector<WorkerStatus> workers;
    std::string ring_name;
    std::uint32_t slots = 0;
    Occupancy occupancy;
    RingCounters counters;
    bool stopping = false;
    std::string ledger_name;
    std::uint64_t total = 0;
    LedgerCounts counts;
    bool done = false;
    nlohmann::json spec;  // the last tau measurement (metrics.jsonl's last "spec" object); null: none
    std::uint32_t world = 1;  // drafter ranks of the run: [distributed] nnodes x [topology] drafters
    nlohmann::json reformations = nlohmann::json::array();  // the gang's last (Reformations::rows)
    std::uint64_t reformations_total = 0;
};

nlohmann::json status_json(const StatusInputs& in);

// The one-line summary (the live status line on a terminal, the periodic line elsewhere):
//   "target 1.2k tok/s 40 smp/s | drafter 1.1k tok/s | ring [##==++....] 2R 2r | step 120 loss 2.345 | 45% | restarts 1"
std::string status_line(const nlohmann::json& status);
// The multi-line report of `hsring status`.
std::string status_text(const nlohmann::json& status);

} // namespace hsring::supervisor
