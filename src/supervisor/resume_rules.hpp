#pragma once
// What may change between a stop (or a kill, or a completed run) and the next `hsring run` of a
// run directory that holds a checkpoint: one rule per key of the run's identity
// (hsring/run_identity.hpp; run.json keeps the previous run's). The table is the one place that
// says it; docs/operations-and-reliability.md prints it.
//
//   Refuse   the checkpoint was trained under the old value and cannot go on under the new one
//            (another drafter, data order, packing or target): the run stops before anything
//            starts, naming the key, both values and how to go on
//   Replan   the steps after the checkpoint are planned again (slot_plan.hpp's rebase): nothing
//            is skipped or trained twice
//   Apply    takes effect from the next step (or the next slot produced, the next evaluation)
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace hsring::supervisor {

enum class OnChange { Refuse, Replan, Apply };

struct ResumeRule {
    std::string_view key;   // a run_identity() key, e.g. "[train] lr"
    OnChange on_change;
    std::string_view why;   // what the key decides (Refuse) or what happens (Replan, Apply)
};

// Every key of run_identity(), in its order (a unit test holds the two together).
const std::vector<ResumeRule>& resume_rules();

struct ResumeCheck {
    std::vector<std::string> refused;  // "KEY was OLD, now NEW: WHY"
    std::vector<std::string> changes;  // "KEY: OLD -> NEW: WHAT HAPPENS"
};

// Compares the identity recorded by the previous run with this run's. Keys missing on either side
// (a run.json of an older hsring) are not compared; a key without a rule is refused.
ResumeCheck check_resume(const nlohmann::json& previous, const nlohmann::json& now);

const char* to_string(OnChange c);

} // namespace hsring::supervisor
