#pragma once
// A drafter type's part of the planner: its memory model and what `hsring plan` reports of its
// micro-batches. Each type defines one beside its arithmetic (dflash_memory.cpp,
// eagle3_memory.cpp); drafter_plans.cpp lists them, one line each. The memory model and the
// report look a type up here and test no type's name.
#include "plan/worker_memory.hpp"
#include "plan/workload.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace hsring::plan {

struct Plan;

struct DrafterPlan {
    std::string_view type;  // [drafter] type
    std::uint64_t (*params)(const Config&, const Derived&);
    // The peak of one micro-batch's forward and backward (memory_model.hpp, drafter_batch_peak).
    std::uint64_t (*batch_peak)(const Config&, const Derived&, Place, const MicroBatch&, bool grads_in_forward);
    // The drafter worker's memory, part by part (memory_model.hpp, drafter_memory).
    WorkerMemory (*memory)(const Config&, const Derived&, const std::string& name, Place, const MicroBatch&,
                           bool grads_in_forward, std::uint64_t world);
    // The report's "drafter" line of the workload (after "drafter  ").
    std::string (*workload_line)(const Plan&);
    // The JSON report: the worst micro-batch's rows (and the type's own fields of it), the
    // workload's fields of the type.
    void (*workload_json)(const Plan&, nlohmann::json& worst, nlohmann::json& workload);
};

// The planner's part of a [drafter] type; fails naming the known ones.
const DrafterPlan& drafter_plan(std::string_view type);

} // namespace hsring::plan
