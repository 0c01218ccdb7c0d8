#pragma once
// `hsring plan` output: a text report for people, one JSON object for scripts. The JSON keeps
// the shape of issue 14:
//   {"gpus": [{"index": 0, "workers": ["target.0"], "predicted_peak_bytes": N,
//              "capacity_bytes": N, "parts": {"<name>": bytes, ...}}, ...],
//    "host": {"predicted_bytes": N, "huge_pages": N, "parts": {...}}}
// with more fields beside them (fits, sources, the workload, suggestions, measurements).
#include "plan/plan.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace hsring::plan {

std::string format_plan(const Plan& p, const std::vector<Suggestion>& suggestions, const Capacity& cap);
nlohmann::json plan_json(const Plan& p, const std::vector<Suggestion>& suggestions, const Capacity& cap);

} // namespace hsring::plan
