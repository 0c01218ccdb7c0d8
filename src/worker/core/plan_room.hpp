#pragma once
// Room for the plan slot that is needed next. The drafters train plan slots in order; when every
// place a needed plan slot could go holds a later one, READY, nobody would ever free one: the
// READY slot of the latest later plan slot goes back instead (READY -> READING -> FREE, its plan
// slot PENDING again: produced again later, the same samples).
//   - a drafter whose needed plan slot is PENDING while the ring is full of later ones (after a
//     rollback: the gang resumed from a checkpoint);
//   - a target on the peer transports whose GPU buffers all hold later READY slots while it writes
//     the needed one (TransportOptions::make_room in hsring/transport.hpp).
#include "hsring/ring.hpp"

#include <cstdint>
#include <functional>
#include <optional>

namespace hsring::worker {

// The READY ring slot that holds the latest plan slot after `needed`, among those whose GPU copy's
// holder `mine` accepts (nullopt: bytes in the host ring only), goes back, its ticket's samples
// re-issued through `repend`. Returns that plan slot; nullopt when none is there or a reader took
// it meanwhile.
std::optional<std::uint64_t> give_back_latest_after(Ring& ring, std::uint64_t needed,
                                                    const std::function<bool(std::optional<Owner>)>& mine,
                                                    const std::function<void(std::uint64_t)>& repend);

// Gives back this writer's READY commit of the latest plan slot after the one `writing` holds:
// READY -> READING -> FREE, its plan slot re-issued through the ring's reclaim hook, so its GPU
// buffer is free again. The drafters train plan slots in order: they need the one being written
// before the later one, and would never pull that while this writer waits for a buffer (after a
// target's death re-issued an earlier plan slot, or a drafter's rollback). True when it gave one
// back; false when nothing later is READY from this writer (then the drafters will take one).
bool give_back_later_commit(Ring& ring, WriteSlot& writing);

} // namespace hsring::worker
