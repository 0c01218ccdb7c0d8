#pragma once
// Cross-process futex on a 32-bit word in shared memory (no FUTEX_PRIVATE_FLAG: the word is
// mapped by several processes, possibly at different addresses).
#include <atomic>
#include <chrono>
#include <cstdint>

namespace hsring::shm {

// Sleeps while *word == expected, at most `timeout`. Spurious returns are fine: callers re-check.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, std::chrono::nanoseconds timeout);
// Wakes every waiter on the word.
void futex_wake_all(std::atomic<std::uint32_t>& word);

} // namespace hsring::shm
