// Reclaim: undoing the slots of an owner that died (WRITING -> FREE, READING -> READY, its
// peer READY slots), finding dead owners, and the reclaim a timed-out wait runs.
#include "hsring/ring.hpp"

#include "hsring/log.hpp"
#include "ring/layout.hpp"
#include "ring/ring_internal.hpp"
#include "shm/region.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace hsring {

using namespace ring_detail;
using std::memory_order_acq_rel;
using std::memory_order_acquire;
using std::memory_order_relaxed;

namespace {
constexpr auto kReclaimEvery = std::chrono::milliseconds(500);
} // namespace

ReclaimResult Ring::reclaim(Owner owner, const std::function<void(std::uint64_t)>& before_free) {
    ReclaimResult r;
    const std::uint64_t writing = make_word(SlotState::Writing, owner);
    const std::uint64_t reading = make_word(SlotState::Reading, owner);
    for (std::uint32_t s = 0; s < header_->slot_count; ++s) {
        SlotControl& c = control(s);
        const std::uint64_t w = c.word.load(memory_order_acquire);
        if (w == writing) {
            const std::uint64_t t = c.ticket.load(memory_order_acquire);
            // Re-issue the samples first: if we die right here the slot is still WRITING(dead)
            // and the next reclaimer repeats this (idempotent).
            if (before_free) before_free(t);
            if (transition(s, writing, make_word(SlotState::Free))) {
                header_->reclaimed_writing.fetch_add(1, memory_order_relaxed);
                r.writing_freed.push_back(s);
                r.tickets_freed.push_back(t);
                bump_and_wake(header_->free_seq, header_->free_waiters);
            }
        } else if (w == reading) {
            if (transition(s, reading, c.ready_word.load(memory_order_relaxed))) {
                header_->reclaimed_reading.fetch_add(1, memory_order_relaxed);
                r.reading_returned.push_back(s);
                bump_and_wake(header_->ready_seq, header_->ready_waiters);
            }
        } else if (w == make_raw(RawState::ReadyPeer, owner)) {
            // Its only copy died with the writer: like WRITING, samples first, then FREE.
            const std::uint64_t t = c.ticket.load(memory_order_acquire);
            if (before_free) before_free(t);
            if (transition(s, w, make_word(SlotState::Free))) {
                header_->peer_lost.fetch_add(1, memory_order_relaxed);
                r.ready_freed.push_back(s);
                r.tickets_freed.push_back(t);
                bump_and_wake(header_->free_seq, header_->free_waiters);
            }
        } else if (w == make_raw(RawState::ReadyBoth, owner)) {
            // The host copy stays: READY (host). The READY word of the commit follows, unless the
            // slot has been read, freed and claimed again meanwhile (then the CAS finds another word).
            if (transition(s, w, make_word(SlotState::Ready))) {
                std::uint64_t expect = w;
                c.ready_word.compare_exchange_strong(expect, make_word(SlotState::Ready), memory_order_relaxed);
                r.ready_to_host.push_back(s);
            }
        }
    }
    const std::uint64_t token = owner_token(owner);
    for (std::uint32_t i = 0; i < kMaxOwners; ++i) {
        std::uint64_t t = token;
        owner_entry(region_->base(), header_, i).token.compare_exchange_strong(t, 0, memory_order_acq_rel);
    }
    if (!r.empty())
        log::info("ring '{}': reclaimed pid {} (incarnation {}): {} WRITING -> FREE, {} READING -> READY{}", name_,
                  owner.pid, owner.incarnation, r.writing_freed.size(), r.reading_returned.size(),
                  r.ready_freed.empty() && r.ready_to_host.empty()
                      ? std::string()
                      : fmt::format(", {} READY only on its GPU -> FREE (samples re-issued), {} READY -> host copy only",
                                    r.ready_freed.size(), r.ready_to_host.size()));
    return r;
}

ReclaimResult Ring::reclaim_dead(const std::function<void(std::uint64_t)>& before_free) {
    ReclaimResult all;
    auto merge = [&](ReclaimResult r) {
        all.writing_freed.insert(all.writing_freed.end(), r.writing_freed.begin(), r.writing_freed.end());
        all.tickets_freed.insert(all.tickets_freed.end(), r.tickets_freed.begin(), r.tickets_freed.end());
        all.reading_returned.insert(all.reading_returned.end(), r.reading_returned.begin(), r.reading_returned.end());
        all.ready_freed.insert(all.ready_freed.end(), r.ready_freed.begin(), r.ready_freed.end());
        all.ready_to_host.insert(all.ready_to_host.end(), r.ready_to_host.begin(), r.ready_to_host.end());
    };
    std::vector<std::uint64_t> known;
    for (std::uint32_t i = 0; i < kMaxOwners; ++i) {
        OwnerEntry& e = owner_entry(region_->base(), header_, i);
        std::uint64_t tok = e.token.load(memory_order_acquire);
        if (tok == 0) continue;
        if (is_reserving(tok)) {
            // Its joiner holds no slot yet; if it died, the entry is free again.
            if (!process_alive(word_owner(tok).pid)) e.token.compare_exchange_strong(tok, 0, memory_order_acq_rel);
            continue;
        }
        const Owner o = word_owner(tok);
        if (process_alive(o.pid, e.start_ticks)) {
            known.push_back(tok);
            continue;
        }
        merge(reclaim(o, before_free));
    }
    // Slots whose owner is not in the table (it left, or the table was wiped): pid check only.
    // A peer READY slot's holder that left (graceful exit) freed its GPU copies with it.
    for (std::uint32_t s = 0; s < header_->slot_count; ++s) {
        const std::uint64_t w = control(s).word.load(memory_order_acquire);
        const SlotState st = word_state(w);
        if (is_peer_ready(w)) {
            if (!owner_alive(word_owner(w))) merge(reclaim(word_owner(w), before_free));
            continue;
        }
        if (st != SlotState::Writing && st != SlotState::Reading) continue;
        const Owner o = word_owner(w);
        if (std::find(known.begin(), known.end(), owner_token(o)) != known.end()) continue;
        if (!process_alive(o.pid)) merge(reclaim(o, before_free));
    }
    return all;
}

void Ring::set_reclaim_hook(std::function<void(std::uint64_t)> before_free) { reclaim_hook_ = std::move(before_free); }

void Ring::maybe_reclaim_on_timeout() {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_reclaim_check_ < kReclaimEvery) return;
    last_reclaim_check_ = now;
    reclaim_dead(reclaim_hook_);
}

} // namespace hsring
