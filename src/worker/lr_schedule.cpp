#include "worker/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace hsring::worker {

double LrSchedule::at(std::uint64_t step) const {
    if (warmup_steps && step <= warmup_steps) return peak * double(step) / double(warmup_steps);
    if (total_steps <= warmup_steps) return peak;
    const double progress = std::clamp(double(step - warmup_steps) / double(total_steps - warmup_steps), 0.0, 1.0);
    const double floor = peak * min_ratio;
    return floor + (peak - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

} // namespace hsring::worker
