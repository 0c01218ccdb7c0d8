#pragma once
// A target's room for the plan slot it is writing, on the peer transports (see
// TransportOptions::make_room in hsring/transport.hpp).
#include "hsring/ring.hpp"

#include <cstdint>

namespace hsring::worker {

// Gives back this writer's READY commit of the latest plan slot after the one `writing` holds:
// READY -> READING -> FREE, its plan slot re-issued through the ring's reclaim hook, so its GPU
// buffer is free again. The drafters train plan slots in order: they need the one being written
// before the later one, and would never pull that while this writer waits for a buffer (after a
// target's death re-issued an earlier plan slot, or a drafter's rollback). True when it gave one
// back; false when nothing later is READY from this writer (then the drafters will take one).
bool give_back_later_commit(Ring& ring, WriteSlot& writing);

} // namespace hsring::worker
