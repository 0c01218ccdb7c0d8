// The ring: creation/attachment, the slot state machine, waits and reclaim (see hsring/ring.hpp
// and ring/layout.hpp for the picture).
#include "hsring/ring.hpp"

#include "hsring/error.hpp"
#include "hsring/log.hpp"
#include "hsring/units.hpp"
#include "ring/layout.hpp"
#include "shm/futex.hpp"
#include "shm/region.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

namespace hsring {

using namespace ring_detail;
using shm::futex_wait;
using shm::futex_wake_all;
using shm::Region;
using std::memory_order_acq_rel;
using std::memory_order_acquire;
using std::memory_order_relaxed;
using std::memory_order_release;
using std::memory_order_seq_cst;

namespace {

RingTestHook g_hook = nullptr;
inline void hook(const char* point) {
    if (g_hook) [[unlikely]] g_hook(point);
}

constexpr auto kWaitSlice = std::chrono::milliseconds(100);
constexpr auto kReclaimEvery = std::chrono::milliseconds(500);
// An owner entry being filled in by `pid`: [pid : 32 | 0 | 0xf]. A joiner killed before it
// published its token leaves this; reclaim_dead() frees it once that pid is gone.
constexpr std::uint64_t kReservingState = 0xf;
constexpr std::uint64_t reserving_token(pid_t pid) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(pid)) << 32) | kReservingState;
}
constexpr bool is_reserving(std::uint64_t tok) { return (tok & 0xf) == kReservingState; }

std::uint64_t fnv1a(std::uint64_t h, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

// Wake-ups: the waiter counts are read after the sequence bump (both seq_cst), so a waiter that
// registered before the bump is woken, and one that registers after it sees the new sequence in
// futex_wait and does not sleep.
void bump_and_wake(std::atomic<std::uint32_t>& seq, std::atomic<std::uint32_t>& waiters) {
    seq.fetch_add(1, memory_order_seq_cst);
    if (waiters.load(memory_order_seq_cst) > 0) futex_wake_all(seq);
}

} // namespace

void set_ring_test_hook(RingTestHook h) { g_hook = h; }

const char* to_string(SlotState s) {
    switch (s) {
    case SlotState::Free: return "FREE";
    case SlotState::Writing: return "WRITING";
    case SlotState::Ready: return "READY";
    case SlotState::Reading: return "READING";
    }
    return "?";
}

const char* to_string(Copies c) {
    switch (c) {
    case Copies::Host: return "host";
    case Copies::Peer: return "peer";
    case Copies::HostAndPeer: return "peer+host";
    }
    return "?";
}

// --- geometry and layout ------------------------------------------------------------------

std::uint64_t RingGeometry::layout_hash() const {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (std::uint64_t v : {std::uint64_t{kVersion}, std::uint64_t{slot_count}, slot_bytes, slot_tokens,
                            std::uint64_t{max_samples}, std::uint64_t{n_layers}, std::uint64_t{hidden},
                            std::uint64_t{dtype_bytes}})
        h = fnv1a(h, v);
    return h;
}

std::string RingGeometry::str() const {
    return fmt::format("{} slots x {} ({} tokens, {} samples, {} layers x {} hidden x {} B)", slot_count,
                       format_bytes(slot_bytes), slot_tokens, max_samples, n_layers, hidden, dtype_bytes);
}

RingGeometry RingGeometry::from(const Config& cfg, const Derived& d) {
    RingGeometry g;
    g.slot_count = d.slots;
    g.slot_bytes = d.slot_payload_bytes;
    g.slot_tokens = cfg.ring.slot_tokens;
    g.max_samples = d.max_samples_per_slot;
    g.n_layers = static_cast<std::uint32_t>(d.layer_ids.size());
    g.hidden = static_cast<std::uint32_t>(d.target.hidden_size);
    g.dtype_bytes = static_cast<std::uint32_t>(hsring::dtype_bytes(cfg.ring.dtype));
    return g;
}

namespace ring_detail {

MetaLayout MetaLayout::of(const RingGeometry& g) {
    MetaLayout m{};
    m.sample_ids = align_up(sizeof(SlotMetaHeader), 8);
    m.seq_lens = m.sample_ids + 8ull * g.max_samples;
    m.sample_flags = m.seq_lens + 4ull * g.max_samples;
    m.token_ids = align_up(m.sample_flags + g.max_samples, 8);
    m.loss_mask = m.token_ids + 4ull * g.slot_tokens;
    m.stride = align_up(m.loss_mask + g.slot_tokens, kMetaAlign);
    return m;
}

Offsets Offsets::of(const RingGeometry& g) {
    Offsets o{};
    o.owners = kHeaderBytes;
    o.controls = o.owners + kMaxOwners * sizeof(OwnerEntry);
    o.metas = align_up(o.controls + std::uint64_t{g.slot_count} * sizeof(SlotControl), kMetaAlign);
    o.meta_stride = MetaLayout::of(g).stride;
    o.payloads = align_up(o.metas + g.slot_count * o.meta_stride, kHugePage);
    o.slot_stride = align_up(g.slot_bytes, kHugePage);
    o.total = o.payloads + g.slot_count * o.slot_stride;
    return o;
}

} // namespace ring_detail

// --- SlotMeta ----------------------------------------------------------------------------

SlotMeta::SlotMeta(SlotMetaHeader* h, const RingGeometry& g) : h_(h), g_(&g) {}
std::uint64_t SlotMeta::ticket() const { return h_->ticket; }
std::uint32_t SlotMeta::writer_rank() const { return h_->writer_rank; }
std::uint32_t SlotMeta::n_samples() const { return h_->n_samples; }
std::uint64_t SlotMeta::n_tokens() const { return h_->n_tokens; }
std::uint64_t SlotMeta::checksum() const { return h_->checksum; }
void SlotMeta::set_writer_rank(std::uint32_t r) { h_->writer_rank = r; }
void SlotMeta::set_counts(std::uint32_t n, std::uint64_t t) {
    HSRING_ASSERT(n <= g_->max_samples && t <= g_->slot_tokens, "{} samples / {} tokens exceed the slot", n, t);
    h_->n_samples = n;
    h_->n_tokens = t;
}
void SlotMeta::set_checksum(std::uint64_t c) { h_->checksum = c; }
std::span<std::uint64_t> SlotMeta::user() { return {h_->user, 8}; }
std::span<std::byte> SlotMeta::transport() {
    return {reinterpret_cast<std::byte*>(h_->transport), sizeof h_->transport};
}

template <typename T>
static std::span<T> meta_array(SlotMetaHeader* h, std::uint64_t off, std::uint64_t n) {
    return {reinterpret_cast<T*>(reinterpret_cast<std::byte*>(h) + off), n};
}
std::span<std::uint64_t> SlotMeta::sample_ids() { return meta_array<std::uint64_t>(h_, MetaLayout::of(*g_).sample_ids, g_->max_samples); }
std::span<std::uint32_t> SlotMeta::seq_lens() { return meta_array<std::uint32_t>(h_, MetaLayout::of(*g_).seq_lens, g_->max_samples); }
std::span<std::int32_t> SlotMeta::token_ids() { return meta_array<std::int32_t>(h_, MetaLayout::of(*g_).token_ids, g_->slot_tokens); }
std::span<std::uint8_t> SlotMeta::loss_mask() { return meta_array<std::uint8_t>(h_, MetaLayout::of(*g_).loss_mask, g_->slot_tokens); }
std::span<std::uint8_t> SlotMeta::sample_flags() { return meta_array<std::uint8_t>(h_, MetaLayout::of(*g_).sample_flags, g_->max_samples); }

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

// --- creation and attachment ---------------------------------------------------------------

static void validate(const RingGeometry& g) {
    if (g.slot_count < 1 || g.slot_count > (1u << 20)) fail("ring geometry: slot_count {} must be 1..1048576", g.slot_count);
    if (g.slot_bytes == 0) fail("ring geometry: slot bytes must be > 0");
    if (g.slot_tokens == 0 || g.max_samples == 0) fail("ring geometry: slot tokens and max samples must be > 0");
}

Ring Ring::create(const RingOptions& opts) {
    const RingGeometry& g = opts.geometry;
    validate(g);
    const Offsets off = Offsets::of(g);
    const std::uint64_t start_ticks = process_start_ticks(::getpid());
    auto init = [&](std::byte* base) {
        auto* h = new (base) RingHeader{};
        std::memset(h->magic, 0, sizeof h->magic);
        h->version = kVersion;
        h->header_bytes = kHeaderBytes;
        h->layout_hash = g.layout_hash();
        h->creator_pid = ::getpid();
        h->creator_start_ticks = start_ticks;
        h->created_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::system_clock::now().time_since_epoch()).count();
        std::snprintf(h->name, sizeof h->name, "%s", opts.name.c_str());
        h->tag.store(opts.tag);
        h->slot_count = g.slot_count;
        h->max_samples = g.max_samples;
        h->slot_bytes = g.slot_bytes;
        h->slot_stride = off.slot_stride;
        h->slot_tokens = g.slot_tokens;
        h->n_layers = g.n_layers;
        h->hidden = g.hidden;
        h->dtype_bytes = g.dtype_bytes;
        h->owners_offset = off.owners;
        h->controls_offset = off.controls;
        h->metas_offset = off.metas;
        h->meta_stride = off.meta_stride;
        h->payloads_offset = off.payloads;
        h->total_bytes = off.total;
        h->next_ticket.store(1);
        for (std::uint32_t i = 0; i < kMaxOwners; ++i) new (base + off.owners + i * sizeof(OwnerEntry)) OwnerEntry{};
        for (std::uint32_t i = 0; i < g.slot_count; ++i) {
            auto* c = new (base + off.controls + i * sizeof(SlotControl)) SlotControl{};
            c->word.store(make_word(SlotState::Free));
        }
        std::memcpy(h->magic, kMagic, sizeof kMagic);  // last: a valid magic means a complete header
    };
    auto region = Region::create(opts.name, off.total, opts.huge_pages, opts.prefault, init);
    auto* h = reinterpret_cast<RingHeader*>(region->base());
    h->huge_pages = region->info().huge_pages ? 1 : 0;
    Ring r;
    r.name_ = opts.name;
    r.bind(std::move(region));
    return r;
}

Ring Ring::attach(std::string_view name, const RingGeometry* expected, const RunTag* tag) {
    auto region = Region::open(name);
    const std::string& path = region->info().path;
    auto* h = reinterpret_cast<const RingHeader*>(region->base());
    if (std::memcmp(h->magic, kMagic, sizeof kMagic) != 0)
        fail("{} is not an hsring ring (bad magic): remove it (rm {}) or choose another [ring] name", path, path);
    if (h->version != kVersion)
        fail("ring {} has layout version {}, this hsring uses version {}: remove it (hsring ring rm {}) and start "
             "again", path, h->version, kVersion, name);
    RingGeometry g{h->slot_count, h->slot_bytes, h->slot_tokens, h->max_samples, h->n_layers, h->hidden, h->dtype_bytes};
    if (g.layout_hash() != h->layout_hash || Offsets::of(g).total != h->total_bytes || h->total_bytes > region->size())
        fail("ring {} is damaged: its header does not match its own geometry ({}); remove it (hsring ring rm {})",
             path, g.str(), name);
    if (expected && expected->layout_hash() != h->layout_hash)
        fail("ring '{}' ({}) has another layout: it holds {}, this run needs {}. It was created by pid {}{}. Stop "
             "that run, or remove the ring (hsring ring rm {}, or hsring run --fresh)", name, path, g.str(),
             expected->str(), h->creator_pid,
             process_alive(static_cast<pid_t>(h->creator_pid), h->creator_start_ticks) ? " (still running)" : " (gone)",
             name);
    if (tag) {
        const RunTag found = h->tag.load();
        if (!tag->differences(found).empty()) refuse_foreign("ring", name, path, found, *tag, name);
    }
    Ring r;
    r.name_ = std::string(name);
    r.bind(std::move(region));
    return r;
}

bool Ring::exists(std::string_view name) { return !Region::find(name).empty(); }
bool Ring::remove(std::string_view name) { return Region::remove(name); }

void Ring::bind(std::unique_ptr<Region> region) {
    region_ = std::move(region);
    header_ = reinterpret_cast<RingHeader*>(region_->base());
    geometry_ = RingGeometry{header_->slot_count, header_->slot_bytes, header_->slot_tokens, header_->max_samples,
                             header_->n_layers, header_->hidden, header_->dtype_bytes};
}

Ring::Ring(Ring&& o) noexcept { *this = std::move(o); }
Ring& Ring::operator=(Ring&& o) noexcept {
    if (this != &o) {
        if (owner_index_ >= 0) leave();
        name_ = std::move(o.name_);
        region_ = std::move(o.region_);
        header_ = std::exchange(o.header_, nullptr);
        geometry_ = o.geometry_;
        self_ = o.self_;
        owner_index_ = std::exchange(o.owner_index_, -1);
        claim_hint_ = o.claim_hint_;
        reclaim_hook_ = std::move(o.reclaim_hook_);
        last_reclaim_check_ = o.last_reclaim_check_;
    }
    return *this;
}

Ring::~Ring() {
    if (owner_index_ >= 0 && header_) leave();
}

const RegionInfo& Ring::region() const { return region_->info(); }
pid_t Ring::creator_pid() const { return static_cast<pid_t>(header_->creator_pid); }
std::uint64_t Ring::creator_start_ticks() const { return header_->creator_start_ticks; }
RunTag Ring::tag() const { return header_->tag.load(); }

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

SlotControl& Ring::control(std::uint32_t slot) const {
    return *reinterpret_cast<SlotControl*>(region_->base() + header_->controls_offset + slot * sizeof(SlotControl));
}
static OwnerEntry& owner_entry(std::byte* base, const RingHeader* h, std::uint32_t i) {
    return *reinterpret_cast<OwnerEntry*>(base + h->owners_offset + i * sizeof(OwnerEntry));
}
std::byte* Ring::payload(std::uint32_t slot) const {
    return region_->base() + header_->payloads_offset + slot * header_->slot_stride;
}
SlotMetaHeader* Ring::meta_header(std::uint32_t slot) const {
    return reinterpret_cast<SlotMetaHeader*>(region_->base() + header_->metas_offset + slot * header_->meta_stride);
}
SlotMeta Ring::meta(std::uint32_t slot) const { return SlotMeta(meta_header(slot), geometry_); }
std::span<std::byte> Ring::payload_area() const {
    return {region_->base() + header_->payloads_offset, header_->slot_count * header_->slot_stride};
}

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

// --- reclaim -----------------------------------------------------------------------------

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

// --- status ------------------------------------------------------------------------------

void Ring::set_stopping(bool stopping) {
    header_->stopping.store(stopping ? 1 : 0, memory_order_release);
    // Wake every waiter so it sees the flag now rather than at its next time slice.
    bump_and_wake(header_->free_seq, header_->free_waiters);
    bump_and_wake(header_->ready_seq, header_->ready_waiters);
}
bool Ring::stopping() const { return header_->stopping.load(memory_order_acquire) != 0; }

SlotState Ring::state(std::uint32_t slot) const { return word_state(control(slot).word.load(memory_order_acquire)); }
std::uint64_t Ring::ticket(std::uint32_t slot) const { return control(slot).ticket.load(memory_order_acquire); }

std::uint32_t Ring::free_sequence() const { return header_->free_seq.load(memory_order_seq_cst); }
void Ring::wait_free(std::uint32_t seen, std::chrono::milliseconds timeout) {
    // Registered before sleeping: a bump after our registration wakes us (see bump_and_wake).
    header_->free_waiters.fetch_add(1, memory_order_seq_cst);
    futex_wait(header_->free_seq, seen, std::min<std::chrono::nanoseconds>(timeout, kWaitSlice));
    header_->free_waiters.fetch_sub(1, memory_order_relaxed);
}

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

bool Ring::owner_alive(Owner o) const {
    const std::uint64_t token = owner_token(o);
    for (std::uint32_t i = 0; i < kMaxOwners; ++i) {
        const OwnerEntry& e = owner_entry(region_->base(), header_, i);
        // acquire: the start time written before the token was published (join()).
        if (e.token.load(memory_order_acquire) == token) return process_alive(o.pid, e.start_ticks);
    }
    return false;
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
