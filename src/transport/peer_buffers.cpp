#include "transport/peer_buffers.hpp"

#include "hsring/error.hpp"

namespace hsring::transport {

PeerBuffers::PeerBuffers(std::uint32_t count) : held_(count) {
    HSRING_ASSERT(count > 0, "a peer writer needs at least one buffer");
}

bool PeerBuffers::is_free(const Ring& ring, const Held& h) const {
    // Ticket before state: a ticket is never reused, so once the slot shows another one (or FREE)
    // this commit is over for good.
    return !h.used || ring.ticket(h.slot) != h.ticket || ring.state(h.slot) == SlotState::Free;
}

std::optional<std::uint32_t> PeerBuffers::find_free(const Ring& ring) const {
    for (std::uint32_t b = 0; b < held_.size(); ++b)
        if (is_free(ring, held_[b])) return b;
    return std::nullopt;
}

std::optional<std::uint32_t> PeerBuffers::wait_free(Ring& ring, std::chrono::milliseconds timeout,
                                                    const std::function<bool()>& stop) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        const std::uint32_t seen = ring.free_sequence();  // before the scan: no release is missed
        if (auto b = find_free(ring)) return b;
        // set_stopping() bumps the free sequence: the wait below ends at once. A signal-set stop
        // flag is seen within one of the ring's wait slices.
        if (ring.stopping() || (stop && stop())) return std::nullopt;
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) return std::nullopt;
        ring.wait_free(seen, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                                 std::chrono::milliseconds(1));
    }
}

void PeerBuffers::hold(std::uint32_t b, std::uint32_t slot, std::uint64_t ticket) { held_.at(b) = {true, slot, ticket}; }

std::uint32_t PeerBuffers::busy(const Ring& ring) const {
    std::uint32_t n = 0;
    for (const Held& h : held_) n += is_free(ring, h) ? 0 : 1;
    return n;
}

} // namespace hsring::transport
