#pragma once
// What every worker holds once started: its environment, the config and derived sizes, the ring
// and ledger it attached to (checked against the config's layout and data set), and the status
// board it publishes its counters on.
#include "hsring/config.hpp"
#include "hsring/dataset.hpp"
#include "hsring/eval_board.hpp"
#include "hsring/ledger.hpp"
#include "hsring/ring.hpp"
#include "hsring/status_board.hpp"
#include "worker/core/worker_env.hpp"

#include <memory>
#include <optional>

namespace hsring::worker {

struct Context {
    WorkerEnv env;
    Config cfg;
    Derived derived;
    Ring ring;
    Ledger ledger;
    StatusBoard status;
    std::optional<data::Dataset> data;  // targets only
    // [data] eval_path: the evaluation board (every worker), the held-out set (targets).
    std::optional<EvalBoard> eval;
    std::optional<data::Dataset> eval_data;

    // Loads the config, attaches ring + ledger + status board, sets the ring's reclaim hook to re-issue a dead
    // writer's samples, joins the ring, loads the data set for targets. Throws hsring::Error.
    static std::unique_ptr<Context> open(int argc, char** argv);

    Context(WorkerEnv e, Config c, Derived d, Ring r, Ledger l, StatusBoard sb, std::optional<data::Dataset> ds)
        : env(std::move(e)), cfg(std::move(c)), derived(std::move(d)), ring(std::move(r)), ledger(std::move(l)),
          status(std::move(sb)), data(std::move(ds)) {}

    // Publishes this worker's counters on the status board (at most every 500 ms, unless forced).
    void publish(WorkerStats& s, bool force = false);

private:
    std::chrono::steady_clock::time_point last_publish_{};
};

} // namespace hsring::worker
