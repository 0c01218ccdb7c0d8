// Read-only views of the ring for status and tests: a slot's state, ticket, owner and holder,
// the occupancy by state and the running counters.
#include "hsring/ring.hpp"

#include "ring/layout.hpp"

#include <optional>

namespace hsring {

using namespace ring_detail;
using std::memory_order_acquire;
using std::memory_order_relaxed;

SlotState Ring::state(std::uint32_t slot) const { return word_state(control(slot).word.load(memory_order_acquire)); }
std::uint64_t Ring::ticket(std::uint32_t slot) const { return control(slot).ticket.load(memory_order_acquire); }

std::optional<Owner> Ring::owner_of(std::uint32_t slot) const {
    const std::uint64_t w = control(slot).word.load(memory_order_acquire);
    const SlotState s = word_state(w);
    if (s == SlotState::Writing || s == SlotState::Reading) return word_owner(w);
    return std::nullopt;
}

std::optional<Owner> Ring::holder_of(std::uint32_t slot) const {
    const std::uint64_t w = control(slot).word.load(memory_order_acquire);
    if (!is_peer_ready(w)) return std::nullopt;
    return word_owner(w);
}

Occupancy Ring::occupancy() const {
    Occupancy o;
    for (std::uint32_t s = 0; s < header_->slot_count; ++s) {
        switch (state(s)) {
        case SlotState::Free: ++o.free; break;
        case SlotState::Writing: ++o.writing; break;
        case SlotState::Ready: ++o.ready; break;
        case SlotState::Reading: ++o.reading; break;
        }
    }
    return o;
}

RingCounters Ring::counters() const {
    RingCounters c;
    c.commits = header_->commits.load(memory_order_relaxed);
    c.releases = header_->releases.load(memory_order_relaxed);
    c.aborts = header_->aborts.load(memory_order_relaxed);
    c.put_backs = header_->put_backs.load(memory_order_relaxed);
    c.reclaimed_writing = header_->reclaimed_writing.load(memory_order_relaxed);
    c.reclaimed_reading = header_->reclaimed_reading.load(memory_order_relaxed);
    c.redeliveries = header_->redeliveries.load(memory_order_relaxed);
    c.peer_lost = header_->peer_lost.load(memory_order_relaxed);
    return c;
}

} // namespace hsring
