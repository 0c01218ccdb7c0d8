// Waiting and stopping: the shared stopping flag (waking every waiter) and wait_free, the futex
// wait on the FREE sequence.
#include "hsring/ring.hpp"

#include "ring/layout.hpp"
#include "ring/ring_internal.hpp"
#include "shm/futex.hpp"

#include <algorithm>
#include <chrono>

namespace hsring {

using namespace ring_detail;
using shm::futex_wait;
using std::memory_order_acquire;
using std::memory_order_relaxed;
using std::memory_order_release;
using std::memory_order_seq_cst;

void Ring::set_stopping(bool stopping) {
    header_->stopping.store(stopping ? 1 : 0, memory_order_release);
    // Wake every waiter so it sees the flag now rather than at its next time slice.
    bump_and_wake(header_->free_seq, header_->free_waiters);
    bump_and_wake(header_->ready_seq, header_->ready_waiters);
}
bool Ring::stopping() const { return header_->stopping.load(memory_order_acquire) != 0; }

std::uint32_t Ring::free_sequence() const { return header_->free_seq.load(memory_order_seq_cst); }
void Ring::wait_free(std::uint32_t seen, std::chrono::milliseconds timeout) {
    // Registered before sleeping: a bump after our registration wakes us (see bump_and_wake).
    header_->free_waiters.fetch_add(1, memory_order_seq_cst);
    futex_wait(header_->free_seq, seen, std::min<std::chrono::nanoseconds>(timeout, kWaitSlice));
    header_->free_waiters.fetch_sub(1, memory_order_relaxed);
}

} // namespace hsring
