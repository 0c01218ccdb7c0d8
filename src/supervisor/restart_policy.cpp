// Restart decisions (see restart_policy.hpp).
#include "supervisor/restart_policy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace hsring::supervisor {

std::size_t RestartHistory::recent(Clock::time_point since) {
    while (!times_.empty() && times_.front() <= since) times_.pop_front();
    return times_.size();
}

RestartDecision RestartPolicy::decide(bool failed, RestartHistory& history, Clock::time_point now) const {
    RestartDecision d;
    if (!failed && cfg_.restart != Restart::Always) return d;  // a clean exit is final
    if (failed && cfg_.restart == Restart::Never) {
        d.kind = RestartDecision::GiveUp;
        d.why = "[supervisor] restart = \"never\"";
        return d;
    }
    const auto window = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg_.restart_window_s));
    const std::size_t recent = history.recent(now - window);
    if (recent >= cfg_.max_restarts) {
        d.kind = RestartDecision::GiveUp;
        d.why = fmt::format("it was restarted {} times within {:g} s ([supervisor] max_restarts = {}, "
                            "restart_window_s = {:g})", recent, cfg_.restart_window_s, cfg_.max_restarts,
                            cfg_.restart_window_s);
        return d;
    }
    d.kind = RestartDecision::Restart;
    // 2^recent overflows nothing that matters: the min() caps it long before.
    const double delay = cfg_.backoff_initial_s * std::pow(2.0, static_cast<double>(std::min<std::size_t>(recent, 60)));
    d.delay = std::chrono::duration<double>(std::min(delay, cfg_.backoff_max_s));
    history.record(now);
    history.count();
    return d;
}

} // namespace hsring::supervisor
