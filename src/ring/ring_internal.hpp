#pragma once
// Helpers the ring's files share (private to src/ring): the test hook, the wait slice, the
// reserving token of an owner entry being joined, the futex wake-up and owner-entry addressing.
#include "hsring/ring.hpp"
#include "ring/layout.hpp"
#include "shm/futex.hpp"

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace hsring::ring_detail {

// Fault injection for tests (set_ring_test_hook); one object, defined in slot_states.cpp.
extern RingTestHook g_hook;
inline void hook(const char* point) {
    if (g_hook) [[unlikely]] g_hook(point);
}

// The longest futex sleep: a waiter re-checks the stopping flag, its deadline and dead owners.
inline constexpr auto kWaitSlice = std::chrono::milliseconds(100);
// An owner entry being filled in by `pid`: [pid : 32 | 0 | 0xf]. A joiner killed before it
// published its token leaves this; reclaim_dead() frees it once that pid is gone.
constexpr std::uint64_t kReservingState = 0xf;
constexpr std::uint64_t reserving_token(pid_t pid) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(pid)) << 32) | kReservingState;
}
constexpr bool is_reserving(std::uint64_t tok) { return (tok & 0xf) == kReservingState; }

// Wake-ups: the waiter counts are read after the sequence bump (both seq_cst), so a waiter that
// registered before the bump is woken, and one that registers after it sees the new sequence in
// futex_wait and does not sleep.
inline void bump_and_wake(std::atomic<std::uint32_t>& seq, std::atomic<std::uint32_t>& waiters) {
    seq.fetch_add(1, std::memory_order_seq_cst);
    if (waiters.load(std::memory_order_seq_cst) > 0) shm::futex_wake_all(seq);
}

inline OwnerEntry& owner_entry(std::byte* base, const RingHeader* h, std::uint32_t i) {
    return *reinterpret_cast<OwnerEntry*>(base + h->owners_offset + i * sizeof(OwnerEntry));
}

} // namespace hsring::ring_detail
