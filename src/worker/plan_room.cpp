#include "worker/plan_room.hpp"

#include "hsring/log.hpp"
#include "worker/packer.hpp"

#include <chrono>
#include <optional>

namespace hsring::worker {

bool give_back_later_commit(Ring& ring, WriteSlot& writing) {
    const auto mine = plan_slot_of(writing.meta());
    if (!mine || !ring.reclaim_hook()) return false;  // held-out batches are taken in any order
    const auto later = [&](const SlotMeta& m) -> std::optional<std::uint64_t> {
        const auto p = plan_slot_of(m);
        return p && *p > *mine ? p : std::nullopt;
    };
    std::optional<std::uint64_t> latest;
    for (std::uint32_t s = 0; s < ring.geometry().slot_count; ++s) {
        if (ring.holder_of(s) != ring.self()) continue;  // READY with its bytes in one of our buffers
        const auto p = later(ring.meta(s));
        if (p && (!latest || *p > *latest)) latest = p;
    }
    if (!latest) return false;
    auto slot = ring.acquire(std::chrono::milliseconds(0), [&](const SlotMeta& m) { return later(m) == latest; });
    if (!slot) return false;  // a drafter took it meanwhile: that frees its buffer too
    if (slot->holder() != ring.self()) return false;  // not ours after all: dropping it puts it back READY
    const std::uint64_t ticket = slot->ticket();
    ring.reclaim_hook()(ticket);  // its plan slot goes back to PENDING before the slot is FREE
    slot->release();
    log::info("plan slot {} is being written and every peer buffer holds a later one: gave back slot ticket {} "
              "(plan slot {}), produced again later", *mine, ticket, *latest);
    return true;
}

} // namespace hsring::worker
