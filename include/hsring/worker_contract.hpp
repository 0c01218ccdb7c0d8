#pragma once
// The supervisor <-> worker contract as code (prose: src/worker/CONTRACT.md). Both sides include
// this header and nothing else to agree on: the worker roles, the environment variables the
// supervisor sets, the exit codes a worker returns, and the rank arithmetic of data-parallel
// drafters across machines. Header-only, no torch, no CUDA.
//
// Ranks: a machine (node) runs `local_world` drafter processes (its [topology] drafters list);
// every machine runs the same number. Drafter `local_rank` of node `node_rank` has the global
// rank node_rank * local_world + local_rank; the world is nnodes * local_world drafters, all in
// one c10d process group. Global rank 0 hosts the rendezvous store and writes checkpoints.
#include <cstdint>
#include <string_view>

namespace hsring {

enum class WorkerRole { Target, Drafter };

constexpr const char* to_string(WorkerRole r) { return r == WorkerRole::Target ? "target" : "drafter"; }

// Worker exit codes.
namespace exit_code {
inline constexpr int kOk = 0;         // done, or stopped on request
inline constexpr int kFailure = 1;    // restartable: a bug, OOM, CUDA error, a peer rank that died
inline constexpr int kUserError = 3;  // bad config, data or model: restarting cannot help; stops the run
inline constexpr int kGangStopped = 4;  // drafter: the gang checkpointed and stopped because another machine stops the run
inline constexpr int kGangRestart = 5;  // drafter: the gang checkpointed and stopped because a peer rank was asked to
                                        // stop (hsring restart, its supervisor died): start again with the gang
inline constexpr int kDiverged = 6;     // drafter: [train] max_nonfinite_steps steps in a row were not finite (or a
                                        // non-finite value reached the state): the last good checkpoint is kept;
                                        // restarting would diverge again: stops the run
} // namespace exit_code

// Environment variables set by the supervisor for every worker.
namespace env {
inline constexpr const char* kWorkerName = "HSRING_WORKER_NAME";   // "target.0", "drafter.1"
inline constexpr const char* kRole = "HSRING_ROLE";                // "target" | "drafter"
inline constexpr const char* kRank = "HSRING_RANK";                // index in its [topology] list (local rank)
inline constexpr const char* kIncarnation = "HSRING_INCARNATION";
inline constexpr const char* kRing = "HSRING_RING";
inline constexpr const char* kLedger = "HSRING_LEDGER";
inline constexpr const char* kDevice = "HSRING_DEVICE";            // "cuda" | "cpu"
inline constexpr const char* kSupervisorPid = "HSRING_SUPERVISOR_PID";
inline constexpr const char* kCudaVisibleDevices = "CUDA_VISIBLE_DEVICES";
// Drafters only: the data-parallel gang.
inline constexpr const char* kNodeRank = "HSRING_NODE_RANK";
inline constexpr const char* kNnodes = "HSRING_NNODES";
inline constexpr const char* kLocalWorld = "HSRING_LOCAL_WORLD";
inline constexpr const char* kMasterAddr = "HSRING_MASTER_ADDR";
inline constexpr const char* kMasterPort = "HSRING_MASTER_PORT";
inline constexpr const char* kDistTimeout = "HSRING_DIST_TIMEOUT_S";
inline constexpr const char* kGangGeneration = "HSRING_GANG";      // +1 at each gang (re)start of this supervisor
// Tests: HSRING_FAULT=<worker>:<point>:<n> (src/worker/CONTRACT.md).
inline constexpr const char* kFault = "HSRING_FAULT";
} // namespace env

// The launcher variables (torchrun / Slurm style) that override [distributed] in the config file.
namespace launcher_env {
inline constexpr const char* kMasterAddr = "MASTER_ADDR";
inline constexpr const char* kMasterPort = "MASTER_PORT";
inline constexpr const char* kNnodes = "NNODES";
inline constexpr const char* kNodeRank = "NODE_RANK";
} // namespace launcher_env

struct GangPlace {
    std::uint32_t node_rank = 0, nnodes = 1;
    std::uint32_t local_rank = 0, local_world = 1;

    constexpr std::uint32_t global_rank() const { return node_rank * local_world + local_rank; }
    constexpr std::uint32_t world() const { return nnodes * local_world; }
    constexpr bool is_master() const { return global_rank() == 0; }
    // The first drafter of its machine writes the machine's files (checkpoint markers, done flag).
    constexpr bool is_local_leader() const { return local_rank == 0; }
    // The machine and local rank of a global rank.
    static constexpr GangPlace of(std::uint32_t global_rank, std::uint32_t nnodes, std::uint32_t local_world) {
        return {global_rank / local_world, nnodes, global_rank % local_world, local_world};
    }
};

// Live-status entries (one writer each) on the machine's status board: targets at their rank,
// drafters at kDrafterStatsBase + local rank.
inline constexpr std::uint32_t kMaxWorkers = 64;
inline constexpr std::uint32_t kDrafterStatsBase = 48;
constexpr std::uint32_t stats_index(WorkerRole role, std::uint32_t local_rank) {
    return role == WorkerRole::Target ? local_rank : kDrafterStatsBase + local_rank;
}

} // namespace hsring
