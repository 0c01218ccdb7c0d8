#pragma once
// When a worker that ended is started again ([supervisor] restart, max_restarts,
// restart_window_s, backoff_initial_s, backoff_max_s). Pure logic on a clock passed in, so the
// tests need no processes and no sleeping.
//
//   ended cleanly (exit 0)   on-failure, never: not restarted      always: restarted
//   failed (exit != 0, signal)                  never: give up     on-failure, always: restarted
//   restarted: after backoff_initial_s x 2^(restarts within the window), at most backoff_max_s;
//   give up once max_restarts restarts happened within restart_window_s.
#include "hsring/config.hpp"

#include <chrono>
#include <deque>
#include <string>

namespace hsring::supervisor {

using Clock = std::chrono::steady_clock;

// The restarts of one worker (its times), kept by the supervisor per worker name.
class RestartHistory {
public:
    void record(Clock::time_point t) { times_.push_back(t); }
    // Restarts that happened after `since`; forgets older ones.
    std::size_t recent(Clock::time_point since);
    std::size_t total() const { return total_; }
    void count() { ++total_; }

private:
    std::deque<Clock::time_point> times_;
    std::size_t total_ = 0;
};

struct RestartDecision {
    enum Kind { Restart, NoRestart, GiveUp } kind = NoRestart;
    std::chrono::duration<double> delay{0};  // for Restart
    std::string why;                         // for GiveUp: the reason, for the run's final message
};

class RestartPolicy {
public:
    explicit RestartPolicy(const SupervisorConfig& cfg) : cfg_(cfg) {}
    // A worker ended at `now`; `failed` = non-zero exit or killed by a signal. A Restart decision
    // is recorded in `history` (it counts towards the cap).
    RestartDecision decide(bool failed, RestartHistory& history, Clock::time_point now) const;

private:
    SupervisorConfig cfg_;
};

} // namespace hsring::supervisor
