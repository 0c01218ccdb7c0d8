#pragma once
// Learning rate per optimizer step: linear warmup to the peak over warmup_steps, then cosine
// decay to peak * min_lr_ratio at total_steps (constant after; total_steps 0 = no decay).
// A pure function of the step, so a restarted drafter continues the same curve.
#include <cstdint>

namespace hsring::worker {

struct LrSchedule {
    double peak = 6e-4;
    double min_ratio = 0.1;
    std::uint64_t warmup_steps = 0;
    std::uint64_t total_steps = 0;

    double at(std::uint64_t step) const;  // step is 1-based
};

} // namespace hsring::worker
