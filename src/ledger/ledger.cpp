// The sample ledger (see hsring/ledger.hpp).
//
//  offset 0 ┌──────────────────────────────────────────────────────────────┐
//           │ LedgerHeader: magic, version, info (fingerprint, N, epochs,  │
//           │   seed, shuffle), cursor | low water | pending futex |        │
//           │   counters | done   (each hot word on its own cache line)     │
//  4 KiB    ├──────────────────────────────────────────────────────────────┤
//           │ entries: atomic u64 [epochs x N]                             │
//           └──────────────────────────────────────────────────────────────┘
// Entry: [state : 2 | payload : 62]; IN_SLOT payload = ticket; CONSUMED and DURABLE payload =
// rank << 48 | step (the drafter's local rank and the optimizer step the sample went into).
#include "hsring/ledger.hpp"

#include "hsring/error.hpp"
#include "hsring/fault.hpp"
#include "hsring/log.hpp"
#include "hsring/units.hpp"
#include "hsring/worker_contract.hpp"
#include "shm/futex.hpp"
#include "shm/region.hpp"
#include "shm/run_tag_block.hpp"

#include <unistd.h>

#include <cstring>
#include <new>

namespace hsring {

namespace ledger_detail {

inline constexpr char kMagic[8] = {'H', 'S', 'L', 'E', 'D', 'G', 'R', '\1'};
// 3: the worker stats moved out to the status board (hsring/status_board.hpp); the machine's
// share of the data set (nnodes, node_rank, dataset_samples) in the header.
// 4: the run tag (whose ledger it is: hsring/run_tag.hpp); consumption counted per drafter rank.
inline constexpr std::uint32_t kVersion = 4;
inline constexpr std::uint64_t kEntriesOffset = 4096;
inline constexpr std::uint32_t kMaxRanks = kMaxWorkers - kDrafterStatsBase;  // drafter ranks per machine

struct LedgerHeader {
    char magic[8];
    std::uint32_t version;
    std::uint32_t shuffle;
    std::uint64_t fingerprint;
    std::uint64_t samples;
    std::uint64_t epochs;
    std::uint64_t seed;
    std::uint64_t total;
    std::int64_t creator_pid;
    std::uint64_t tokens_per_epoch;
    std::uint64_t dataset_samples;
    std::uint32_t nnodes;
    std::uint32_t node_rank;
    shm::RunTagBlock tag;
    // Next position never handed out yet.
    alignas(64) std::atomic<std::uint64_t> cursor;
    // [gen : 24 | pos : 40]: no position below pos is PENDING, unless gen moved on (see take()).
    alignas(64) std::atomic<std::uint64_t> low_water;
    alignas(64) std::atomic<std::uint32_t> pending_seq;  // futex: bumped when entries go PENDING
    std::atomic<std::uint32_t> pending_waiters;
    alignas(64) std::atomic<std::uint32_t> done;
    // Entries CONSUMED or DURABLE, per drafter rank of this machine. Each counter has one writer
    // at a time (its rank: consume, recover; the supervisor while it builds the ledger alone),
    // so recover() can recount its rank's exactly: a kill between an entry's CAS and the counter
    // update skews nothing for good.
    struct alignas(64) RankCount {
        std::atomic<std::uint64_t> n;
    };
    RankCount consumed[kMaxRanks];
};
static_assert(sizeof(LedgerHeader) <= kEntriesOffset);

constexpr std::uint64_t kStateShift = 62;
constexpr std::uint64_t kPayloadMask = (std::uint64_t{1} << 62) - 1;
constexpr std::uint64_t make(EntryState s, std::uint64_t payload = 0) {
    return (static_cast<std::uint64_t>(s) << kStateShift) | (payload & kPayloadMask);
}
constexpr EntryState state_of(std::uint64_t e) { return static_cast<EntryState>(e >> kStateShift); }
constexpr std::uint64_t consumed_payload(std::uint32_t rank, std::uint64_t step) {
    return (std::uint64_t{rank} << 48) | (step & ((std::uint64_t{1} << 48) - 1));
}
constexpr std::uint32_t consumed_rank(std::uint64_t e) { return static_cast<std::uint32_t>((e & kPayloadMask) >> 48); }
constexpr std::uint64_t consumed_step(std::uint64_t e) { return e & ((std::uint64_t{1} << 48) - 1); }

constexpr std::uint64_t kPosMask = (std::uint64_t{1} << 40) - 1;
constexpr std::uint64_t lw_pos(std::uint64_t v) { return v & kPosMask; }
constexpr std::uint64_t lw_gen(std::uint64_t v) { return v >> 40; }
constexpr std::uint64_t lw_make(std::uint64_t gen, std::uint64_t pos) { return (gen << 40) | (pos & kPosMask); }

} // namespace ledger_detail

using namespace ledger_detail;

namespace {
LedgerTestHook g_hook = nullptr;
inline void hook(const char* point) {
    if (g_hook) [[unlikely]] g_hook(point);
}
constexpr auto kSweepEvery = std::chrono::seconds(1);
} // namespace

void set_ledger_test_hook(LedgerTestHook h) { g_hook = h; }
using std::memory_order_acq_rel;
using std::memory_order_acquire;
using std::memory_order_relaxed;
using std::memory_order_release;
using std::memory_order_seq_cst;

std::string Ledger::name_for_ring(std::string_view ring) { return std::string(ring) + "-ledger"; }

std::uint64_t Ledger::region_bytes(const LedgerInfo& info) { return kEntriesOffset + info.total() * 8; }

Ledger Ledger::create(std::string_view name, const LedgerInfo& info, const RunTag& tag,
                      const std::vector<Trained>& durable) {
    if (info.samples == 0 || info.epochs == 0) fail("ledger '{}': a run needs at least one sample and one epoch", name);
    if (info.total() > kPosMask) fail("ledger '{}': {} samples x {} epochs is too many", name, info.samples, info.epochs);
    const std::uint64_t bytes = region_bytes(info);
    auto init = [&](std::byte* base) {
        auto* h = new (base) LedgerHeader{};
        h->version = kVersion;
        h->shuffle = info.shuffle ? 1 : 0;
        h->fingerprint = info.data_fingerprint;
        h->samples = info.samples;
        h->epochs = info.epochs;
        h->seed = info.seed;
        h->total = info.total();
        h->creator_pid = ::getpid();
        h->tokens_per_epoch = info.tokens_per_epoch;
        h->dataset_samples = info.dataset_samples ? info.dataset_samples : info.samples;
        h->nnodes = info.nnodes;
        h->node_rank = info.node_rank;
        h->tag.store(tag);
        // Entries: a fresh file reads as zero = PENDING with payload 0. What the checkpoint holds
        // is marked here, before the ledger has its name: a ledger that is visible is complete
        // (a kill or a Ctrl-C while it is built leaves no half-marked ledger to train on).
        auto* entries = reinterpret_cast<std::atomic<std::uint64_t>*>(base + kEntriesOffset);
        for (const Trained& t : durable) {
            if (t.pos >= info.total())
                fail("ledger '{}': position {} of a train log is beyond the {} entries of this run's data set: the "
                     "train logs belong to another data set", name, t.pos, info.total());
            if (t.rank >= kMaxRanks) fail("ledger '{}': a train record of drafter rank {} (at most {})", name, t.rank, kMaxRanks);
            fault::point("rebuild");
            if (state_of(entries[t.pos].load(memory_order_relaxed)) == EntryState::Durable) continue;
            entries[t.pos].store(make(EntryState::Durable, consumed_payload(t.rank, t.step)), memory_order_relaxed);
            h->consumed[t.rank].n.fetch_add(1, memory_order_relaxed);
        }
        std::memcpy(h->magic, kMagic, sizeof kMagic);
    };
    Ledger l;
    l.region_ = shm::Region::create(name, bytes, HugePages::Off, false, init);
    l.header_ = reinterpret_cast<LedgerHeader*>(l.region_->base());
    l.info_ = info;
    return l;
}

Ledger Ledger::attach(std::string_view name, const LedgerInfo* expected, const RunTag* tag) {
    Ledger l;
    l.region_ = shm::Region::open(name);
    auto* h = reinterpret_cast<LedgerHeader*>(l.region_->base());
    const std::string& path = l.region_->info().path;
    if (std::memcmp(h->magic, kMagic, sizeof kMagic) != 0) fail("{} is not an hsring ledger (bad magic)", path);
    if (h->version != kVersion) fail("ledger {} has version {}, this hsring uses {}: remove it (hsring ring rm)", path, h->version, kVersion);
    if (kEntriesOffset + h->total * 8 > l.region_->size()) fail("ledger {} is truncated", path);
    l.header_ = h;
    l.info_ = LedgerInfo{h->fingerprint, h->samples, static_cast<std::uint32_t>(h->epochs), h->seed, h->shuffle != 0,
                         h->dataset_samples, h->nnodes, h->node_rank, h->tokens_per_epoch};
    if (tag) {
        const RunTag found = h->tag.load();
        if (!tag->differences(found).empty())
            refuse_foreign("ledger", name, path, found, *tag, name.substr(0, name.size() - std::string_view("-ledger").size()));
    }
    if (expected) {
        const LedgerInfo& e = *expected;
        if (e.data_fingerprint != l.info_.data_fingerprint || e.samples != l.info_.samples)
            fail("ledger '{}' belongs to another data set ({} samples, fingerprint {:016x}; this run has {} samples, "
                 "{:016x}): remove the run's ring (hsring ring rm, or hsring run --fresh) to start over",
                 name, l.info_.samples, l.info_.data_fingerprint, e.samples, e.data_fingerprint);
        if (e.nnodes != l.info_.nnodes || e.node_rank != l.info_.node_rank)
            fail("ledger '{}' holds machine {} of {}'s share of the data; this run is machine {} of {}: start over "
                 "with hsring run --fresh (or hsring ring rm)", name, l.info_.node_rank, l.info_.nnodes, e.node_rank,
                 e.nnodes);
        if (e.epochs != l.info_.epochs || e.seed != l.info_.seed || e.shuffle != l.info_.shuffle)
            fail("ledger '{}' was made for {} epochs, seed {}, shuffle {}; this run asks for {} epochs, seed {}, shuffle "
                 "{}: use the same [data]/[run] settings, or start over with hsring run --fresh",
                 name, l.info_.epochs, l.info_.seed, l.info_.shuffle, e.epochs, e.seed, e.shuffle);
    }
    return l;
}

bool Ledger::exists(std::string_view name) { return !shm::Region::find(name).empty(); }
RunTag Ledger::tag() const { return header_->tag.load(); }
bool Ledger::remove(std::string_view name) { return shm::Region::remove(name); }

Ledger::Ledger(Ledger&&) noexcept = default;
Ledger& Ledger::operator=(Ledger&&) noexcept = default;
Ledger::~Ledger() = default;

std::atomic<std::uint64_t>& Ledger::entry(std::uint64_t pos) const {
    HSRING_ASSERT(pos < info_.total(), "ledger position {} out of range {}", pos, info_.total());
    return reinterpret_cast<std::atomic<std::uint64_t>*>(region_->base() + kEntriesOffset)[pos];
}

// --- targets -------------------------------------------------------------------------------

std::optional<std::uint64_t> Ledger::take(std::uint64_t ticket) {
    const std::uint64_t in_slot = make(EntryState::InSlot, ticket);
    auto try_take = [&](std::uint64_t p) {
        std::uint64_t e = entry(p).load(memory_order_relaxed);
        return state_of(e) == EntryState::Pending && entry(p).compare_exchange_strong(e, in_slot, memory_order_acq_rel);
    };
    const std::uint64_t total = info_.total();
    for (;;) {
        std::uint64_t lw = header_->low_water.load(memory_order_acquire);
        std::uint64_t cur = header_->cursor.load(memory_order_acquire);
        if (lw_pos(lw) < cur) {
            // Positions below the cursor that went back to PENDING.
            for (std::uint64_t p = lw_pos(lw); p < cur; ++p)
                if (try_take(p)) return p;
            // Nothing there: move the mark up, unless a re-pend changed it meanwhile (then its
            // generation moved on, this CAS fails and the scan runs again from the new mark).
            header_->low_water.compare_exchange_strong(lw, lw_make(lw_gen(lw), cur), memory_order_acq_rel);
            continue;
        }
        if (cur >= total) {
            // Everything was handed out. A position re-pended by a process killed between its CAS
            // and lowering the mark is PENDING below the mark, where no scan looks: sweep for it now
            // and then (cheap: once a second, and only on this idle path).
            const auto now = std::chrono::steady_clock::now();
            if (now - last_sweep_ < kSweepEvery) return std::nullopt;
            last_sweep_ = now;
            std::uint64_t p = 0;
            while (p < total && state_of(entry(p).load(memory_order_relaxed)) != EntryState::Pending) ++p;
            if (p == total) return std::nullopt;
            log::debug("ledger: position {} was PENDING below the low-water mark: found by a sweep", p);
            lower_low_water(p);
            continue;
        }
        if (header_->cursor.compare_exchange_weak(cur, cur + 1, memory_order_acq_rel) && try_take(cur)) return cur;
    }
}

void Ledger::lower_low_water(std::uint64_t pos) {
    std::uint64_t lw = header_->low_water.load(memory_order_acquire);
    while (!header_->low_water.compare_exchange_weak(lw, lw_make(lw_gen(lw) + 1, std::min(lw_pos(lw), pos)),
                                                     memory_order_acq_rel)) {
    }
    header_->pending_seq.fetch_add(1, memory_order_seq_cst);
    if (header_->pending_waiters.load(memory_order_seq_cst) > 0) shm::futex_wake_all(header_->pending_seq);
}

bool Ledger::to_pending(std::uint64_t pos, std::uint64_t expected) {
    // Entry first, then the mark: a taker that sees the new mark also sees the PENDING entry.
    if (!entry(pos).compare_exchange_strong(expected, make(EntryState::Pending), memory_order_acq_rel)) return false;
    hook("repend.cas");
    lower_low_water(pos);
    return true;
}

bool Ledger::untake(std::uint64_t pos, std::uint64_t ticket) { return to_pending(pos, make(EntryState::InSlot, ticket)); }

void Ledger::wait_pending(std::chrono::milliseconds timeout) {
    const std::uint32_t seen = header_->pending_seq.load(memory_order_seq_cst);
    if (header_->done.load(memory_order_acquire)) return;
    header_->pending_waiters.fetch_add(1, memory_order_seq_cst);
    shm::futex_wait(header_->pending_seq, seen, timeout);
    header_->pending_waiters.fetch_sub(1, memory_order_relaxed);
}

// --- reclaim / drafter ---------------------------------------------------------------------

std::uint64_t Ledger::repend_ticket(std::uint64_t ticket) {
    if (ticket == 0) return 0;
    const std::uint64_t in_slot = make(EntryState::InSlot, ticket);
    std::uint64_t n = 0;
    // Positions of one slot were taken close together, but a re-pended one can sit anywhere below
    // the cursor: scan everything handed out so far (milliseconds for millions of entries).
    const std::uint64_t cur = std::min(header_->cursor.load(memory_order_acquire), info_.total());
    for (std::uint64_t p = 0; p < cur; ++p)
        if (entry(p).load(memory_order_relaxed) == in_slot && to_pending(p, in_slot)) ++n;
    if (n) log::debug("ledger: {} samples of reclaimed slot ticket {} go back to PENDING", n, ticket);
    return n;
}

bool Ledger::consume(std::uint64_t pos, std::uint64_t ticket, std::uint32_t rank, std::uint64_t step) {
    std::uint64_t expected = make(EntryState::InSlot, ticket);
    if (!entry(pos).compare_exchange_strong(expected, make(EntryState::Consumed, consumed_payload(rank, step)),
                                            memory_order_acq_rel))
        return false;
    hook("consume.cas");
    header_->consumed[rank].n.fetch_add(1, memory_order_relaxed);
    return true;
}

std::uint64_t Ledger::make_durable(std::uint32_t rank, std::uint64_t step) {
    std::uint64_t n = 0;
    for (std::uint64_t p = 0; p < info_.total(); ++p) {
        std::uint64_t e = entry(p).load(memory_order_relaxed);
        if (state_of(e) == EntryState::Consumed && consumed_rank(e) == rank && consumed_step(e) <= step &&
            entry(p).compare_exchange_strong(e, make(EntryState::Durable, e & kPayloadMask), memory_order_acq_rel))
            ++n;
    }
    return n;
}

Ledger::Recovery Ledger::recover(std::uint32_t rank, std::uint64_t step) {
    HSRING_ASSERT(rank < kMaxRanks, "drafter rank {}", rank);
    Recovery r;
    std::uint64_t kept = 0;                      // rank's entries CONSUMED or DURABLE after the pass
    std::uint64_t lowest_pending = info_.total();  // any rank's
    for (std::uint64_t p = 0; p < info_.total(); ++p) {
        std::uint64_t e = entry(p).load(memory_order_relaxed);
        const EntryState st = state_of(e);
        if (st == EntryState::Pending && p < lowest_pending) lowest_pending = p;
        if ((st != EntryState::Consumed && st != EntryState::Durable) || consumed_rank(e) != rank) continue;
        if (consumed_step(e) <= step) {
            ++kept;
            if (st == EntryState::Consumed &&
                entry(p).compare_exchange_strong(e, make(EntryState::Durable, e & kPayloadMask), memory_order_acq_rel))
                ++r.durable;
        } else if (to_pending(p, e)) {
            ++r.repended;
        }
    }
    // Recount: nobody else writes this rank's entries or its counter while it recovers.
    header_->consumed[rank].n.store(kept, memory_order_relaxed);
    // A position left PENDING above a mark that a killed process did not lower is found again.
    if (lowest_pending < info_.total()) lower_low_water(lowest_pending);
    return r;
}

// --- status --------------------------------------------------------------------------------

EntryState Ledger::state(std::uint64_t pos) const { return state_of(entry(pos).load(memory_order_acquire)); }

Ledger::EntryView Ledger::view(std::uint64_t pos) const {
    const std::uint64_t e = entry(pos).load(memory_order_acquire);
    EntryView v{state_of(e)};
    if (v.state == EntryState::Consumed || v.state == EntryState::Durable) {
        v.rank = consumed_rank(e);
        v.step = consumed_step(e);
    }
    return v;
}

LedgerCounts Ledger::counts() const {
    LedgerCounts c;
    for (std::uint64_t p = 0; p < info_.total(); ++p) {
        switch (state_of(entry(p).load(memory_order_relaxed))) {
        case EntryState::Pending: ++c.pending; break;
        case EntryState::InSlot: ++c.in_slot; break;
        case EntryState::Consumed: ++c.consumed; break;
        case EntryState::Durable: ++c.durable; break;
        }
    }
    return c;
}

std::uint64_t Ledger::consumed_or_durable() const {
    std::uint64_t n = 0;
    for (const auto& c : header_->consumed) n += c.n.load(memory_order_acquire);
    return n;
}

void Ledger::repair() {
    std::uint64_t counts[kMaxRanks] = {};
    std::uint64_t lowest_pending = info_.total();
    for (std::uint64_t p = 0; p < info_.total(); ++p) {
        const std::uint64_t e = entry(p).load(memory_order_relaxed);
        const EntryState st = state_of(e);
        if (st == EntryState::Pending && p < lowest_pending) lowest_pending = p;
        if ((st == EntryState::Consumed || st == EntryState::Durable) && consumed_rank(e) < kMaxRanks)
            ++counts[consumed_rank(e)];
    }
    for (std::uint32_t r = 0; r < kMaxRanks; ++r) header_->consumed[r].n.store(counts[r], memory_order_relaxed);
    if (lowest_pending < info_.total()) lower_low_water(lowest_pending);
}
bool Ledger::done() const { return header_->done.load(memory_order_acquire) != 0; }
void Ledger::set_done() {
    header_->done.store(1, memory_order_release);
    header_->pending_seq.fetch_add(1, memory_order_seq_cst);
    shm::futex_wake_all(header_->pending_seq);
}

} // namespace hsring
