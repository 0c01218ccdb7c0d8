// The slot state machine: every transition is one CAS on a slot's control word (claim, commit,
// abort, acquire, release, put_back, discard), and the WriteSlot/ReadSlot handles that drive it.
#include "hsring/ring.hpp"

#include "hsring/error.hpp"
#include "ring/layout.hpp"
#include "ring/ring_internal.hpp"
#include "shm/futex.hpp"

#include <algorithm>
#include <chrono>
#include <limits>

namespace hsring {

using namespace ring_detail;
using shm::futex_wait;
using std::memory_order_acq_rel;
using std::memory_order_acquire;
using std::memory_order_relaxed;
using std::memory_order_seq_cst;

// The one test hook of the process (declared in ring_internal.hpp); hook points are transitions.
RingTestHook ring_detail::g_hook = nullptr;
void set_ring_test_hook(RingTestHook h) { g_hook = h; }

// --- handles -----------------------------------------------------------------------------

WriteSlot::WriteSlot(WriteSlot&& o) noexcept : ring_(o.ring_), index_(o.index_) { o.ring_ = nullptr; }
WriteSlot::~WriteSlot() {
    if (ring_) ring_->finish_write(index_, false);
}
std::uint64_t WriteSlot::ticket() const { return ring_->control(index_).ticket.load(memory_order_relaxed); }
std::span<std::byte> WriteSlot::payload() { return {ring_->payload(index_), ring_->geometry_.slot_bytes}; }
SlotMeta WriteSlot::meta() { return ring_->meta(index_); }
void WriteSlot::set_copies(Copies c) {
    // Ours until commit; the commit CAS (release) publishes it with the slot.
    ring_->control(index_).ready_word.store(ready_word(c, ring_->self_), memory_order_relaxed);
}
bool WriteSlot::commit() {
    HSRING_ASSERT(ring_, "commit of a finished slot");
    bool ok = ring_->finish_write(index_, true);
    ring_ = nullptr;
    return ok;
}
bool WriteSlot::abort() {
    HSRING_ASSERT(ring_, "abort of a finished slot");
    bool ok = ring_->finish_write(index_, false);
    ring_ = nullptr;
    return ok;
}

ReadSlot::ReadSlot(ReadSlot&& o) noexcept : ring_(o.ring_), index_(o.index_), acquired_(o.acquired_) { o.ring_ = nullptr; }
ReadSlot::~ReadSlot() {
    if (ring_) ring_->finish_read(index_, false);
}
std::uint64_t ReadSlot::ticket() const { return ring_->control(index_).ticket.load(memory_order_relaxed); }
std::span<const std::byte> ReadSlot::payload() const { return {ring_->payload(index_), ring_->geometry_.slot_bytes}; }
SlotMeta ReadSlot::meta() const { return ring_->meta(index_); }
std::uint32_t ReadSlot::deliveries() const { return ring_->control(index_).deliveries.load(memory_order_relaxed); }
Copies ReadSlot::copies() const { return copies_of(acquired_); }
Owner ReadSlot::holder() const { return is_peer_ready(acquired_) ? word_owner(acquired_) : Owner{}; }
bool ReadSlot::discard() {
    HSRING_ASSERT(ring_, "discard of a finished slot");
    bool ok = ring_->discard_read(index_);
    ring_ = nullptr;
    return ok;
}
bool ReadSlot::release() {
    HSRING_ASSERT(ring_, "release of a finished slot");
    bool ok = ring_->finish_read(index_, true);
    ring_ = nullptr;
    return ok;
}
bool ReadSlot::put_back() {
    HSRING_ASSERT(ring_, "put_back of a finished slot");
    bool ok = ring_->finish_read(index_, false);
    ring_ = nullptr;
    return ok;
}

// --- the state machine ---------------------------------------------------------------------

bool Ring::transition(std::uint32_t slot, std::uint64_t from, std::uint64_t to) {
    // acq_rel: acquire the previous owner's writes (payload, metadata, ticket), release ours.
    return control(slot).word.compare_exchange_strong(from, to, memory_order_acq_rel, memory_order_relaxed);
}

std::optional<WriteSlot> Ring::claim(std::chrono::milliseconds timeout) {
    HSRING_ASSERT(owner_index_ >= 0, "claim() before join()");
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const std::uint32_t n = header_->slot_count;
    const std::uint64_t mine = make_word(SlotState::Writing, self_);
    for (;;) {
        if (header_->stopping.load(memory_order_acquire)) return std::nullopt;
        const std::uint32_t seen = header_->free_seq.load(memory_order_seq_cst);
        for (std::uint32_t i = 0; i < n; ++i) {
            const std::uint32_t s = (claim_hint_ + i) % n;
            if (word_state(control(s).word.load(memory_order_relaxed)) != SlotState::Free) continue;
            if (!transition(s, make_word(SlotState::Free), mine)) continue;
            claim_hint_ = s + 1;
            hook("claim");
            SlotControl& c = control(s);
            // Ticket after the claim: a writer dead before this store leaves ticket 0 or the
            // previous commit's ticket, whose samples were all consumed before its release.
            const std::uint64_t t = header_->next_ticket.fetch_add(1, memory_order_relaxed);
            c.ticket.store(t, memory_order_relaxed);
            c.deliveries.store(0, memory_order_relaxed);
            c.ready_word.store(make_word(SlotState::Ready), memory_order_relaxed);  // host unless set_copies()
            SlotMetaHeader* mh = meta_header(s);
            *mh = SlotMetaHeader{};
            mh->ticket = t;
            return WriteSlot(this, s);
        }
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) return std::nullopt;
        maybe_reclaim_on_timeout();
        header_->free_waiters.fetch_add(1, memory_order_seq_cst);
        futex_wait(header_->free_seq, seen, std::min<std::chrono::nanoseconds>(deadline - now, kWaitSlice));
        header_->free_waiters.fetch_sub(1, memory_order_relaxed);
    }
}

bool Ring::finish_write(std::uint32_t slot, bool commit) {
    const std::uint64_t mine = make_word(SlotState::Writing, self_);
    if (commit) {
        hook("commit.before");
        if (!transition(slot, mine, control(slot).ready_word.load(memory_order_relaxed))) return false;
        header_->commits.fetch_add(1, memory_order_relaxed);
        bump_and_wake(header_->ready_seq, header_->ready_waiters);
        hook("commit.after");
        return true;
    }
    hook("abort.before");
    if (!transition(slot, mine, make_word(SlotState::Free))) return false;
    header_->aborts.fetch_add(1, memory_order_relaxed);
    bump_and_wake(header_->free_seq, header_->free_waiters);
    return true;
}

std::optional<ReadSlot> Ring::acquire(std::chrono::milliseconds timeout, const SlotFilter& want) {
    HSRING_ASSERT(owner_index_ >= 0, "acquire() before join()");
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const std::uint32_t n = header_->slot_count;
    const std::uint64_t mine = make_word(SlotState::Reading, self_);
    for (;;) {
        const std::uint32_t seen = header_->ready_seq.load(memory_order_seq_cst);
        // The oldest READY slot (lowest ticket) that is wanted, so no slot starves behind newer ones.
        std::uint32_t best = n;
        std::uint64_t best_ticket = std::numeric_limits<std::uint64_t>::max(), best_word = 0;
        for (std::uint32_t s = 0; s < n; ++s) {
            const std::uint64_t w = control(s).word.load(memory_order_acquire);
            if (word_state(w) != SlotState::Ready) continue;
            const std::uint64_t t = control(s).ticket.load(memory_order_relaxed);
            if (t < best_ticket && (!want || want(meta(s)))) {
                best_ticket = t;
                best = s;
                best_word = w;
            }
        }
        if (best < n) {
            // A peer copy whose writer is gone is never handed out: reclaim that writer first
            // (its peer-only slots go FREE with their samples re-issued, the others host READY).
            if (is_peer_ready(best_word) && !owner_alive(word_owner(best_word))) {
                reclaim(word_owner(best_word), reclaim_hook_);
                continue;
            }
            if (!transition(best, best_word, mine)) continue;  // another reader won it: rescan
            // A host READY word carries no owner: between our scan and our CAS the slot may have been
            // read, freed, written and committed again (ABA). Another commit is not the one we chose
            // (nor necessarily one we want): give it back exactly as it was and look again.
            if (want && control(best).ticket.load(memory_order_acquire) != best_ticket) {
                transition(best, mine, best_word);
                continue;
            }
            const std::uint32_t d = control(best).deliveries.fetch_add(1, memory_order_relaxed);
            if (d > 0) header_->redeliveries.fetch_add(1, memory_order_relaxed);
            hook("acquire");
            return ReadSlot(this, best, best_word);
        }
        if (header_->stopping.load(memory_order_acquire)) return std::nullopt;
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) return std::nullopt;
        maybe_reclaim_on_timeout();
        header_->ready_waiters.fetch_add(1, memory_order_seq_cst);
        futex_wait(header_->ready_seq, seen, std::min<std::chrono::nanoseconds>(deadline - now, kWaitSlice));
        header_->ready_waiters.fetch_sub(1, memory_order_relaxed);
    }
}

bool Ring::finish_read(std::uint32_t slot, bool release) {
    const std::uint64_t mine = make_word(SlotState::Reading, self_);
    if (release) {
        hook("release.before");
        if (!transition(slot, mine, make_word(SlotState::Free))) return false;
        header_->releases.fetch_add(1, memory_order_relaxed);
        bump_and_wake(header_->free_seq, header_->free_waiters);
        hook("release.after");
        return true;
    }
    if (!transition(slot, mine, control(slot).ready_word.load(memory_order_relaxed))) return false;
    header_->put_backs.fetch_add(1, memory_order_relaxed);
    bump_and_wake(header_->ready_seq, header_->ready_waiters);
    return true;
}

bool Ring::discard_read(std::uint32_t slot) {
    // Samples first, as in a reclaim: if we die right after, the slot is still READING(me) and
    // our reclaim makes it READY again; its next reader finds the writer dead and discards it.
    if (reclaim_hook_) reclaim_hook_(control(slot).ticket.load(memory_order_relaxed));
    if (!transition(slot, make_word(SlotState::Reading, self_), make_word(SlotState::Free))) return false;
    header_->peer_lost.fetch_add(1, memory_order_relaxed);
    bump_and_wake(header_->free_seq, header_->free_waiters);
    return true;
}

} // namespace hsring
