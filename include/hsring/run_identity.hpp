#pragma once
// What every machine of a run must agree on, as one flat JSON object {"[table] key": value}: the
// keys that decide what is trained and how the gang moves in lockstep (the model's shape and
// captured layers, the drafter, the data set's identity, the training schedule, the step size,
// the number of machines and drafters per machine). Machine-local keys (GPU indices, ring size,
// run dir, supervisor policy, master address) are left out. At rendezvous each machine's
// identity is compared with the master's and every difference is named.
#include "hsring/config.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace hsring {

nlohmann::json run_identity(const Config& cfg, const Derived& d, std::uint64_t data_fingerprint,
                            std::uint64_t eval_fingerprint);

// "[train] lr is 0.001 on machine 1, 0.0006 on machine 0 (the master); ..." or "" when equal.
std::string identity_differences(const nlohmann::json& mine, const nlohmann::json& master, std::uint32_t my_node);

} // namespace hsring
