#pragma once
// What the supervisor starts: one worker per [topology] entry, named target.0, target.1, ...,
// drafter.0 in every command, log and status line, with the program and arguments of
// src/worker/CONTRACT.md for the run's [run] mode.
#include "hsring/config.hpp"
#include "hsring/worker_contract.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hsring::supervisor {

using hsring::WorkerRole;

struct WorkerSpec {
    std::string name;                   // "target.0"
    WorkerRole role = WorkerRole::Target;
    std::uint32_t rank = 0;             // index in its [topology] list (a drafter's local rank)
    Place place;
    std::string program;                // found with locate_program()
    std::vector<std::string> role_args; // e.g. {"--role", "target"} for the synthetic worker
    std::uint32_t stats_index = 0;      // its WorkerStats entry on the status board (hsring::stats_index)
};

// Targets first, then drafters, in [topology] order.
std::vector<WorkerSpec> worker_specs(const Config& cfg);

// The index of the worker called `name`; an unknown name is an error listing the valid ones.
std::size_t find_worker(const std::vector<WorkerSpec>& specs, std::string_view name);

// "target.0, target.1, drafter.0"
std::string worker_names(const std::vector<WorkerSpec>& specs);

} // namespace hsring::supervisor
