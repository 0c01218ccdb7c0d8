// Worker specs from the config (see worker_spec.hpp and src/worker/CONTRACT.md).
#include "supervisor/worker_spec.hpp"

#include "hsring/error.hpp"
#include "hsring/status_board.hpp"

namespace hsring::supervisor {

std::vector<WorkerSpec> worker_specs(const Config& cfg) {
    const bool synthetic = cfg.run.mode == RunMode::Synthetic;
    std::vector<WorkerSpec> out;
    auto add = [&](WorkerRole role, const std::vector<Place>& places) {
        for (std::uint32_t rank = 0; rank < places.size(); ++rank) {
            WorkerSpec s;
            s.role = role;
            s.rank = rank;
            s.place = places[rank];
            s.name = std::string(to_string(role)) + "." + std::to_string(rank);
            if (synthetic) {
                s.program = "hsring-synth-worker";
                s.role_args = {"--role", to_string(role)};
            } else {
                s.program = role == WorkerRole::Target ? "hsring-target" : "hsring-drafter";
            }
            s.stats_index = hsring::stats_index(role, rank);
            out.push_back(std::move(s));
        }
    };
    add(WorkerRole::Target, cfg.topology.targets);
    add(WorkerRole::Drafter, cfg.topology.drafters);
    return out;
}

std::size_t find_worker(const std::vector<WorkerSpec>& specs, std::string_view name) {
    for (std::size_t i = 0; i < specs.size(); ++i)
        if (specs[i].name == name) return i;
    fail("unknown worker '{}': this run's workers are {}", name, worker_names(specs));
}

std::string worker_names(const std::vector<WorkerSpec>& specs) {
    std::string s;
    for (const auto& w : specs) s += (s.empty() ? "" : ", ") + w.name;
    return s;
}

} // namespace hsring::supervisor
