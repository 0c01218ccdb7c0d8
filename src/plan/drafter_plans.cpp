// The drafter types' parts of the planner (see drafter_plan.hpp): one line per type.
#include "plan/drafter_plan.hpp"

#include "hsring/error.hpp"

#include <array>

namespace hsring::plan {

extern const DrafterPlan kDFlashPlan;  // dflash_memory.cpp
extern const DrafterPlan kEagle3Plan;  // eagle3_memory.cpp

const DrafterPlan& drafter_plan(std::string_view type) {
    static const std::array<const DrafterPlan*, 2> kPlans{&kDFlashPlan, &kEagle3Plan};
    std::string known;
    for (const DrafterPlan* p : kPlans) {
        if (p->type == type) return *p;
        known += (known.empty() ? "\"" : ", \"") + std::string(p->type) + "\"";
    }
    fail("hsring plan: no memory model for [drafter] type = \"{}\" (the planner knows {})", type, known);
}

} // namespace hsring::plan
