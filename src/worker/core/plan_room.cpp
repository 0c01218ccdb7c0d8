#include "worker/core/plan_room.hpp"

#include "hsring/log.hpp"
#include "worker/core/packer.hpp"

#include <chrono>
#include <optional>

namespace hsring::worker {

std::optional<std::uint64_t> give_back_latest_after(Ring& ring, std::uint64_t needed,
                                                    const std::function<bool(std::optional<Owner>)>& mine,
                                                    const std::function<void(std::uint64_t)>& repend) {
    const auto later = [&](const SlotMeta& m) -> std::optional<std::uint64_t> {
        const auto p = plan_slot_of(m);
        return p && *p > needed ? p : std::nullopt;
    };
    std::optional<std::uint64_t> latest;
    for (std::uint32_t s = 0; s < ring.geometry().slot_count; ++s) {
        if (ring.state(s) != SlotState::Ready || !mine(ring.holder_of(s))) continue;
        const auto p = later(ring.meta(s));
        if (p && (!latest || *p > *latest)) latest = p;
    }
    if (!latest) return std::nullopt;
    auto slot = ring.acquire(std::chrono::milliseconds(0), [&](const SlotMeta& m) { return later(m) == latest; });
    if (!slot) return std::nullopt;            // a reader took it meanwhile: that makes room too
    if (!mine(slot->holder())) return std::nullopt;  // not one of ours after all: dropped, it is READY again
    const std::uint64_t ticket = slot->ticket();
    repend(ticket);  // its plan slot goes back to PENDING before the ring slot is FREE
    slot->release();
    return latest;
}

bool give_back_later_commit(Ring& ring, WriteSlot& writing) {
    const auto needed = plan_slot_of(writing.meta());
    if (!needed || !ring.reclaim_hook()) return false;  // held-out batches are taken in any order
    // READY with its bytes in one of this writer's buffers.
    const auto mine = [&](std::optional<Owner> h) { return h == ring.self(); };
    std::uint64_t ticket = 0;
    const auto gave = give_back_latest_after(ring, *needed, mine, [&](std::uint64_t t) {
        ticket = t;
        ring.reclaim_hook()(t);
    });
    if (!gave) return false;
    log::info("plan slot {} is being written and every peer buffer holds a later one: gave back slot ticket {} "
              "(plan slot {}), produced again later", *needed, ticket, *gave);
    return true;
}

} // namespace hsring::worker
