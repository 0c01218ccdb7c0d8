#include "worker/core/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace hsring::worker {

double LrSchedule::progress(std::uint64_t step, std::uint64_t tokens_done, std::uint64_t warmup_end_tokens) const {
    if (step <= warmup_steps) return 0.0;
    if (max_steps) {
        if (max_steps <= warmup_steps) return 1.0;
        return std::clamp(double(step - warmup_steps) / double(max_steps - warmup_steps), 0.0, 1.0);
    }
    if (total_tokens <= warmup_end_tokens) return total_tokens ? 1.0 : 0.0;
    const double done = tokens_done > warmup_end_tokens ? double(tokens_done - warmup_end_tokens) : 0.0;
    return std::clamp(done / double(total_tokens - warmup_end_tokens), 0.0, 1.0);
}

double LrSchedule::at(std::uint64_t step, std::uint64_t tokens_done, std::uint64_t warmup_end_tokens) const {
    if (warmup_steps && step <= warmup_steps) return peak * double(step) / double(warmup_steps);
    const double p = progress(step, tokens_done, warmup_end_tokens);
    const double floor = peak * min_ratio;
    return floor + (peak - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
}

} // namespace hsring::worker
