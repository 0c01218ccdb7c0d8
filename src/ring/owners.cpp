// The owner table: join/leave (reserve, fill, publish a token), whether an owner is alive, and
// who uses the ring (owners(), live_users()).
#include "hsring/ring.hpp"

#include "hsring/error.hpp"
#include "ring/layout.hpp"
#include "ring/ring_internal.hpp"
#include "shm/region.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <utility>

namespace hsring {

using namespace ring_detail;
using std::memory_order_acquire;
using std::memory_order_release;

// --- owners ------------------------------------------------------------------------------

void Ring::join(Role role, std::uint32_t incarnation, std::string_view name) {
    if (owner_index_ >= 0) leave();
    self_ = Owner{::getpid(), incarnation & 0x0fffffffu};
    const std::uint64_t token = owner_token(self_);
    for (std::uint32_t i = 0; i < kMaxOwners; ++i) {
        OwnerEntry& e = owner_entry(region_->base(), header_, i);
        std::uint64_t expect = 0;
        // Reserve, fill, then publish the token (release): a reader that sees the token also
        // sees the start time, so a live owner is never judged dead by a stale start time.
        if (!e.token.compare_exchange_strong(expect, reserving_token(self_.pid), memory_order_acquire)) continue;
        hook("join.reserved");
        e.start_ticks = process_start_ticks(self_.pid);
        e.role = static_cast<std::uint32_t>(role);
        std::snprintf(e.name, sizeof e.name, "%.*s", static_cast<int>(name.size()), name.data());
        e.token.store(token, memory_order_release);
        owner_index_ = static_cast<int>(i);
        return;
    }
    fail("ring '{}': the owner table is full ({} processes); reclaim dead owners (hsring status) or restart the run",
         name_, kMaxOwners);
}

void Ring::leave() {
    if (owner_index_ < 0) return;
    OwnerEntry& e = owner_entry(region_->base(), header_, static_cast<std::uint32_t>(owner_index_));
    std::uint64_t token = owner_token(self_);
    e.token.compare_exchange_strong(token, 0, memory_order_release);
    owner_index_ = -1;
}

// --- who is there ------------------------------------------------------------------------

bool Ring::owner_alive(Owner o) const {
    const std::uint64_t token = owner_token(o);
    for (std::uint32_t i = 0; i < kMaxOwners; ++i) {
        const OwnerEntry& e = owner_entry(region_->base(), header_, i);
        // acquire: the start time written before the token was published (join()).
        if (e.token.load(memory_order_acquire) == token) return process_alive(o.pid, e.start_ticks);
    }
    return false;
}

std::vector<OwnerInfo> Ring::owners() const {
    std::vector<OwnerInfo> out;
    for (std::uint32_t i = 0; i < kMaxOwners; ++i) {
        const OwnerEntry& e = owner_entry(region_->base(), header_, i);
        const std::uint64_t tok = e.token.load(memory_order_acquire);
        if (tok == 0) continue;
        OwnerInfo o;
        if (is_reserving(tok)) {  // being joined (or its joiner died mid-join)
            o.owner = Owner{word_owner(tok).pid, 0};
            o.name = "(joining)";
            o.alive = process_alive(o.owner.pid);
            out.push_back(std::move(o));
            continue;
        }
        o.owner = word_owner(tok);
        o.role = static_cast<Role>(e.role);
        o.name.assign(e.name, strnlen(e.name, sizeof e.name));
        o.alive = process_alive(o.owner.pid, e.start_ticks);
        out.push_back(std::move(o));
    }
    return out;
}

std::vector<OwnerInfo> Ring::live_users() const {
    std::vector<OwnerInfo> out;
    const pid_t me = ::getpid();
    if (creator_pid() != me && process_alive(creator_pid(), creator_start_ticks())) {
        OwnerInfo c;
        c.owner = Owner{creator_pid(), 0};
        c.name = "supervisor (the `hsring run` that created it)";
        c.alive = true;
        out.push_back(c);
    }
    for (OwnerInfo& o : owners())
        if (o.alive && o.owner.pid != me && o.owner.pid != creator_pid()) out.push_back(std::move(o));
    return out;
}

} // namespace hsring
