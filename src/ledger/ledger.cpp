// The sample ledger (see hsring/ledger.hpp).
//
//  offset 0 ┌──────────────────────────────────────────────────────────────┐
//           │ LedgerHeader: magic, version, info (fingerprint, N, epochs,  │
//           │   seed, shuffle), plan size and offsets, run tag |            │
//           │   low water | pending futex | done | needs                   │
//           │   (each hot word on its own cache line)                       │
//  4 KiB    ├──────────────────────────────────────────────────────────────┤
//           │ plan: first position of every plan slot, u64 [P + 1]         │
//           ├──────────────────────────────────────────────────────────────┤
//           │ plan slots: atomic u64 [P]                                   │
//           ├──────────────────────────────────────────────────────────────┤
//           │ entries: atomic u64 [epochs x N]                             │
//           └──────────────────────────────────────────────────────────────┘
// Word (plan slot or sample): [state : 3 | payload : 61]; IN_SLOT payload = ticket; CONSUMED and
// DURABLE payload = rank << 48 | step (the drafter's local rank and the optimizer step);
// REJECTED payload = the reason.
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

#include <algorithm>
#include <cstring>
#include <map>
#include <new>

namespace hsring {

namespace ledger_detail {

inline constexpr char kMagic[8] = {'H', 'S', 'L', 'E', 'D', 'G', 'R', '\1'};
// 3: the worker stats moved out to the status board (hsring/status_board.hpp); the machine's
// share of the data set (nnodes, node_rank, dataset_samples) in the header.
// 4: the run tag (whose ledger it is: hsring/run_tag.hpp); consumption counted per drafter rank.
// 5: the packer's plan (plan slots produced and consumed as a whole), REJECTED samples, the
//    drafters' needs (the targets' window); no per-rank counters.
inline constexpr std::uint32_t kVersion = 5;
inline constexpr std::uint64_t kPlanOffset = 4096;
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
    std::uint32_t drafter_ranks;
    std::uint32_t reserved_;
    std::uint64_t plan_slots;
    std::uint64_t slots_offset;    // plan slot words
    std::uint64_t entries_offset;  // sample entries
    shm::RunTagBlock tag;
    // [gen : 24 | j : 40]: no plan slot below j is PENDING, unless gen moved on (see take_slot()).
    alignas(64) std::atomic<std::uint64_t> low_water;
    alignas(64) std::atomic<std::uint32_t> pending_seq;  // futex: bumped when plan slots go PENDING or the window moves
    std::atomic<std::uint32_t> pending_waiters;
    alignas(64) std::atomic<std::uint32_t> done;
    // The next plan slot each local drafter rank needs (one writer each: its rank).
    struct alignas(64) Need {
        std::atomic<std::uint64_t> j;
    };
    Need need[kMaxRanks];
};
static_assert(sizeof(LedgerHeader) <= kPlanOffset);

constexpr std::uint64_t kStateShift = 61;
constexpr std::uint64_t kPayloadMask = (std::uint64_t{1} << 61) - 1;
constexpr std::uint64_t make(EntryState s, std::uint64_t payload = 0) {
    return (static_cast<std::uint64_t>(s) << kStateShift) | (payload & kPayloadMask);
}
constexpr EntryState state_of(std::uint64_t e) { return static_cast<EntryState>(e >> kStateShift); }
constexpr std::uint64_t trained_payload(std::uint32_t rank, std::uint64_t step) {
    return (std::uint64_t{rank} << 48) | (step & ((std::uint64_t{1} << 48) - 1));
}
constexpr std::uint32_t rank_of(std::uint64_t e) { return static_cast<std::uint32_t>((e & kPayloadMask) >> 48); }
constexpr std::uint64_t step_of(std::uint64_t e) { return e & ((std::uint64_t{1} << 48) - 1); }
constexpr bool trained(std::uint64_t e) {
    return state_of(e) == EntryState::Consumed || state_of(e) == EntryState::Durable;
}

constexpr std::uint64_t kPosMask = (std::uint64_t{1} << 40) - 1;
constexpr std::uint64_t lw_pos(std::uint64_t v) { return v & kPosMask; }
constexpr std::uint64_t lw_gen(std::uint64_t v) { return v >> 40; }
constexpr std::uint64_t lw_make(std::uint64_t gen, std::uint64_t pos) { return (gen << 40) | (pos & kPosMask); }

struct Offsets {
    std::uint64_t slots, entries, bytes;
    static Offsets of(std::uint64_t plan_slots, std::uint64_t total) {
        Offsets o{};
        o.slots = align_up(kPlanOffset + (plan_slots + 1) * 8, 64);
        o.entries = align_up(o.slots + plan_slots * 8, 64);
        o.bytes = o.entries + total * 8;
        return o;
    }
};

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

const char* to_string(EntryState s) {
    switch (s) {
    case EntryState::Pending: return "PENDING";
    case EntryState::InSlot: return "IN_SLOT";
    case EntryState::Consumed: return "CONSUMED";
    case EntryState::Durable: return "DURABLE";
    case EntryState::Rejected: return "REJECTED";
    }
    return "?";
}

std::string describe(RejectReason r) {
    switch (r) {
    case RejectReason::NonFiniteHidden: return "non-finite hidden states";
    }
    return fmt::format("reason {}", static_cast<int>(r));
}

std::string Ledger::name_for_ring(std::string_view ring) { return std::string(ring) + "-ledger"; }

std::uint64_t Ledger::region_bytes(const LedgerInfo& info, std::uint64_t plan_slots) {
    return Offsets::of(plan_slots ? plan_slots : info.total(), info.total()).bytes;
}

Ledger Ledger::create(std::string_view name, const LedgerInfo& info, std::span<const std::uint64_t> plan_first,
                      const RunTag& tag, const std::vector<Trained>& durable) {
    if (info.samples == 0 || info.epochs == 0) fail("ledger '{}': a run needs at least one sample and one epoch", name);
    if (info.total() > kPosMask) fail("ledger '{}': {} samples x {} epochs is too many", name, info.samples, info.epochs);
    if (info.drafter_ranks == 0 || info.drafter_ranks > kMaxRanks)
        fail("ledger '{}': {} drafter ranks on one machine (1..{})", name, info.drafter_ranks, kMaxRanks);
    HSRING_ASSERT(plan_first.size() >= 2 && plan_first.front() == 0 && plan_first.back() == info.total(),
                  "a plan of {} entries for {} positions", plan_first.size(), info.total());
    const std::uint64_t P = plan_first.size() - 1;
    const Offsets off = Offsets::of(P, info.total());
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
        h->drafter_ranks = info.drafter_ranks;
        h->plan_slots = P;
        h->slots_offset = off.slots;
        h->entries_offset = off.entries;
        h->tag.store(tag);
        auto* first = reinterpret_cast<std::uint64_t*>(base + kPlanOffset);
        std::copy(plan_first.begin(), plan_first.end(), first);
        // Words: a fresh file reads as zero = PENDING. What the checkpoint holds is marked here,
        // before the ledger has its name: a ledger that is visible is complete (a kill or a
        // Ctrl-C while it is built leaves no half-marked ledger to train on).
        auto* slots = reinterpret_cast<std::atomic<std::uint64_t>*>(base + off.slots);
        auto* entries = reinterpret_cast<std::atomic<std::uint64_t>*>(base + off.entries);
        for (const Trained& t : durable) {
            if (t.pos >= info.total())
                fail("ledger '{}': position {} of a train log is beyond the {} entries of this run's data set: the "
                     "train logs belong to another data set", name, t.pos, info.total());
            if (t.rank >= kMaxRanks) fail("ledger '{}': a train record of drafter rank {} (at most {})", name, t.rank, kMaxRanks);
            fault::point("rebuild");
            entries[t.pos].store(t.rejected ? make(EntryState::Rejected, static_cast<std::uint64_t>(RejectReason::NonFiniteHidden))
                                            : make(EntryState::Durable, trained_payload(t.rank, t.step)),
                                 memory_order_relaxed);
        }
        // A plan slot whose every sample is in the weights (or rejected) is DURABLE with them;
        // one that is so in part belongs to another plan: training on would skip or repeat samples.
        std::map<std::uint64_t, const Trained*> by_pos;
        for (const Trained& t : durable) by_pos[t.pos] = &t;
        for (std::uint64_t j = 0; j < P; ++j) {
            std::uint64_t covered = 0;
            const Trained* any = nullptr;
            for (std::uint64_t p = first[j]; p < first[j + 1]; ++p) {
                auto it = by_pos.find(p);
                if (it == by_pos.end()) continue;
                ++covered;
                if (!any || !it->second->rejected) any = it->second;
            }
            if (covered == 0) continue;
            if (covered != first[j + 1] - first[j])
                fail("ledger '{}': the train logs hold {} of the {} samples of plan slot {} (positions {}..{}): they "
                     "were written with another packing plan ([ring] slot_tokens, max_samples_per_slot, or the data "
                     "set changed); start over in another run directory", name, covered, first[j + 1] - first[j], j,
                     first[j], first[j + 1] - 1);
            slots[j].store(make(EntryState::Durable, trained_payload(any->rank, any->step)), memory_order_relaxed);
        }
        for (std::uint32_t r = 0; r < kMaxRanks; ++r) h->need[r].j.store(0, memory_order_relaxed);
        std::memcpy(h->magic, kMagic, sizeof kMagic);
    };
    Ledger l;
    l.region_ = shm::Region::create(name, off.bytes, HugePages::Off, false, init);
    l.header_ = reinterpret_cast<LedgerHeader*>(l.region_->base());
    l.first_ = reinterpret_cast<const std::uint64_t*>(l.region_->base() + kPlanOffset);
    l.slots_ = reinterpret_cast<std::atomic<std::uint64_t>*>(l.region_->base() + off.slots);
    l.entries_ = reinterpret_cast<std::atomic<std::uint64_t>*>(l.region_->base() + off.entries);
    l.info_ = info;
    return l;
}

Ledger Ledger::attach(std::string_view name, const LedgerInfo* expected, const RunTag* tag) {
    Ledger l;
    l.region_ = shm::Region::open(name);
    auto* h = reinterpret_cast<LedgerHeader*>(l.region_->base());
    const std::string& path = l.region_->info().path;
    if (std::memcmp(h->magic, kMagic, sizeof kMagic) != 0) fail("{} is not an hsring ledger (bad magic)", path);
    if (h->version != kVersion)
        fail("ledger {} has version {}, this hsring uses {}: remove it (hsring ring rm {})", path, h->version, kVersion,
             name.substr(0, name.size() - std::string_view("-ledger").size()));
    const Offsets off = Offsets::of(h->plan_slots, h->total);
    if (off.slots != h->slots_offset || off.entries != h->entries_offset || off.bytes > l.region_->size())
        fail("ledger {} is truncated or damaged", path);
    l.header_ = h;
    l.first_ = reinterpret_cast<const std::uint64_t*>(l.region_->base() + kPlanOffset);
    l.slots_ = reinterpret_cast<std::atomic<std::uint64_t>*>(l.region_->base() + off.slots);
    l.entries_ = reinterpret_cast<std::atomic<std::uint64_t>*>(l.region_->base() + off.entries);
    l.info_ = LedgerInfo{h->fingerprint, h->samples, static_cast<std::uint32_t>(h->epochs), h->seed, h->shuffle != 0,
                         h->dataset_samples, h->nnodes, h->node_rank, h->tokens_per_epoch, h->drafter_ranks};
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
    return entries_[pos];
}

std::atomic<std::uint64_t>& Ledger::slot(std::uint64_t j) const {
    HSRING_ASSERT(j < header_->plan_slots, "plan slot {} out of range {}", j, header_->plan_slots);
    return slots_[j];
}

std::uint64_t Ledger::plan_slots() const { return header_->plan_slots; }
std::uint64_t Ledger::first(std::uint64_t j) const {
    HSRING_ASSERT(j <= header_->plan_slots);
    return first_[j];
}
std::vector<std::uint64_t> Ledger::plan() const { return {first_, first_ + header_->plan_slots + 1}; }

// --- targets -------------------------------------------------------------------------------

std::optional<std::uint64_t> Ledger::take_slot(std::uint64_t ticket, std::uint64_t end) {
    const std::uint64_t in_slot = make(EntryState::InSlot, ticket);
    const std::uint64_t P = header_->plan_slots;
    end = std::min(end, P);
    for (;;) {
        std::uint64_t lw = header_->low_water.load(memory_order_acquire);
        std::uint64_t j = lw_pos(lw);
        // Below the first PENDING slot nothing is PENDING: move the mark up, unless a re-issue
        // changed it meanwhile (then its generation moved on and this CAS fails; harmless).
        while (j < P && state_of(slot(j).load(memory_order_acquire)) != EntryState::Pending) ++j;
        if (j != lw_pos(lw)) header_->low_water.compare_exchange_strong(lw, lw_make(lw_gen(lw), j), memory_order_acq_rel);
        if (j >= P) {
            // Everything is handed out. A plan slot re-pended by a process killed between its CAS
            // and lowering the mark is PENDING below the mark, where no scan looks: sweep for it
            // now and then (cheap: once a second, and only on this idle path).
            const auto now = std::chrono::steady_clock::now();
            if (now - last_sweep_ < kSweepEvery) return std::nullopt;
            last_sweep_ = now;
            std::uint64_t k = 0;
            while (k < P && state_of(slot(k).load(memory_order_relaxed)) != EntryState::Pending) ++k;
            if (k == P) return std::nullopt;
            log::debug("ledger: plan slot {} was PENDING below the low-water mark: found by a sweep", k);
            lower_low_water(k);
            continue;
        }
        for (; j < end; ++j) {
            std::uint64_t w = slot(j).load(memory_order_acquire);
            if (state_of(w) != EntryState::Pending || !slot(j).compare_exchange_strong(w, in_slot, memory_order_acq_rel))
                continue;
            // Ours. Its samples follow (a PENDING slot's samples are PENDING, or REJECTED for good).
            for (std::uint64_t p = first_[j]; p < first_[j + 1]; ++p) {
                std::uint64_t e = entry(p).load(memory_order_acquire);
                if (state_of(e) == EntryState::Rejected) continue;
                if (state_of(e) != EntryState::Pending || !entry(p).compare_exchange_strong(e, in_slot, memory_order_acq_rel))
                    fail("ledger: sample position {} of plan slot {} is {} while the slot was PENDING: the ledger is "
                         "inconsistent; stop the run and rebuild it from the checkpoint (hsring ring rm, then hsring run)",
                         p, j, to_string(state_of(entry(p).load())));
            }
            return j;
        }
        return std::nullopt;
    }
}

bool Ledger::reject(std::uint64_t pos, std::uint64_t ticket, RejectReason reason) {
    std::uint64_t expected = make(EntryState::InSlot, ticket);
    return entry(pos).compare_exchange_strong(expected, make(EntryState::Rejected, static_cast<std::uint64_t>(reason)),
                                              memory_order_acq_rel);
}

std::uint64_t Ledger::window_base() const {
    std::uint64_t base = header_->plan_slots;
    for (std::uint32_t r = 0; r < header_->drafter_ranks; ++r)
        base = std::min(base, header_->need[r].j.load(memory_order_acquire));
    return base;
}

void Ledger::wake_takers() {
    header_->pending_seq.fetch_add(1, memory_order_seq_cst);
    if (header_->pending_waiters.load(memory_order_seq_cst) > 0) shm::futex_wake_all(header_->pending_seq);
}

void Ledger::lower_low_water(std::uint64_t j) {
    std::uint64_t lw = header_->low_water.load(memory_order_acquire);
    while (!header_->low_water.compare_exchange_weak(lw, lw_make(lw_gen(lw) + 1, std::min(lw_pos(lw), j)),
                                                     memory_order_acq_rel)) {
    }
    wake_takers();
}

void Ledger::wait_pending(std::chrono::milliseconds timeout) {
    const std::uint32_t seen = header_->pending_seq.load(memory_order_seq_cst);
    if (header_->done.load(memory_order_acquire)) return;
    header_->pending_waiters.fetch_add(1, memory_order_seq_cst);
    shm::futex_wait(header_->pending_seq, seen, timeout);
    header_->pending_waiters.fetch_sub(1, memory_order_relaxed);
}

// --- reclaim / drafter ---------------------------------------------------------------------

std::uint64_t Ledger::repend_slot(std::uint64_t j, std::uint64_t expected, bool any_in_slot) {
    // Samples first, then the slot: a taker that sees the slot PENDING finds its samples PENDING.
    // A process killed midway leaves the slot word as it was; whoever re-pends it again finishes.
    // Only samples in the slot's own word move: a reclaimer racing a new take of the same plan slot
    // (under another ticket) leaves the new take alone. any_in_slot: the slot is CONSUMED or
    // DURABLE (nobody else can take it), so samples still IN_SLOT from a consume cut short by a
    // kill are its own too.
    std::uint64_t n = 0;
    for (std::uint64_t p = first_[j]; p < first_[j + 1]; ++p) {
        std::uint64_t e = entry(p).load(memory_order_acquire);
        const bool own = e == expected || (trained(expected) && trained(e) && (e & kPayloadMask) == (expected & kPayloadMask));
        if (!own && !(any_in_slot && state_of(e) == EntryState::InSlot)) continue;
        if (entry(p).compare_exchange_strong(e, make(EntryState::Pending), memory_order_acq_rel)) ++n;
    }
    if (!slot(j).compare_exchange_strong(expected, make(EntryState::Pending), memory_order_acq_rel)) return n;
    hook("repend.cas");
    lower_low_water(j);
    return n;
}

std::uint64_t Ledger::repend_ticket(std::uint64_t ticket) {
    if (ticket == 0) return 0;
    const std::uint64_t in_slot = make(EntryState::InSlot, ticket);
    std::uint64_t n = 0;
    for (std::uint64_t j = 0; j < header_->plan_slots; ++j)
        if (slot(j).load(memory_order_relaxed) == in_slot) n += repend_slot(j, in_slot, false);
    if (n) log::debug("ledger: {} samples of reclaimed slot ticket {} go back to PENDING", n, ticket);
    return n;
}

void Ledger::set_need(std::uint32_t rank, std::uint64_t j) {
    HSRING_ASSERT(rank < kMaxRanks, "drafter rank {}", rank);
    if (header_->need[rank].j.exchange(j, memory_order_acq_rel) != j) wake_takers();  // the window moved
}

std::uint64_t Ledger::need(std::uint32_t rank) const { return header_->need[rank].j.load(memory_order_acquire); }

bool Ledger::consume_slot(std::uint64_t j, std::uint64_t ticket, std::uint32_t rank, std::uint64_t step) {
    const std::uint64_t in_slot = make(EntryState::InSlot, ticket), done = make(EntryState::Consumed, trained_payload(rank, step));
    std::uint64_t expected = in_slot;
    if (!slot(j).compare_exchange_strong(expected, done, memory_order_acq_rel)) return false;
    hook("consume.cas");
    // A kill from here on leaves some samples IN_SLOT(ticket) under a CONSUMED slot: recover()
    // re-issues the slot whole.
    for (std::uint64_t p = first_[j]; p < first_[j + 1]; ++p) {
        std::uint64_t e = in_slot;
        entry(p).compare_exchange_strong(e, done, memory_order_acq_rel);
    }
    return true;
}

std::uint64_t Ledger::durable_slot(std::uint64_t j, std::uint64_t w) {
    // Samples first: a slot that reads DURABLE has durable samples.
    const std::uint64_t d = make(EntryState::Durable, w & kPayloadMask);
    std::uint64_t n = 0;
    for (std::uint64_t p = first_[j]; p < first_[j + 1]; ++p) {
        std::uint64_t e = w;
        if (entry(p).compare_exchange_strong(e, d, memory_order_acq_rel)) ++n;
    }
    slot(j).compare_exchange_strong(w, d, memory_order_acq_rel);
    return n;
}

std::uint64_t Ledger::make_durable(std::uint32_t rank, std::uint64_t step) {
    std::uint64_t n = 0;
    for (std::uint64_t j = 0; j < header_->plan_slots; ++j) {
        const std::uint64_t w = slot(j).load(memory_order_acquire);
        if (state_of(w) == EntryState::Consumed && rank_of(w) == rank && step_of(w) <= step) n += durable_slot(j, w);
    }
    return n;
}

Ledger::Recovery Ledger::recover(std::uint32_t rank, std::uint64_t step) {
    HSRING_ASSERT(rank < kMaxRanks, "drafter rank {}", rank);
    return recover_ranks(rank, rank + 1, step);
}

Ledger::Recovery Ledger::recover_ranks_from(std::uint32_t first_rank, std::uint64_t step) {
    return recover_ranks(first_rank, kMaxRanks, step);
}

void Ledger::set_drafter_ranks(std::uint32_t n) {
    if (n == 0 || n > kMaxRanks) fail("ledger: {} drafter ranks on one machine (1..{})", n, kMaxRanks);
    if (n == header_->drafter_ranks) return;
    for (std::uint32_t r = 0; r < kMaxRanks; ++r) header_->need[r].j.store(0, memory_order_relaxed);
    header_->drafter_ranks = n;
    info_.drafter_ranks = n;
    wake_takers();
}

Ledger::Recovery Ledger::recover_ranks(std::uint32_t begin, std::uint32_t end, std::uint64_t step) {
    Recovery r;
    for (std::uint64_t j = 0; j < header_->plan_slots; ++j) {
        const std::uint64_t w = slot(j).load(memory_order_acquire);
        if (!trained(w) || rank_of(w) < begin || rank_of(w) >= end) continue;
        if (step_of(w) > step) r.repended += repend_slot(j, w, true);
        else if (state_of(w) == EntryState::Consumed) r.durable += durable_slot(j, w);
    }
    // A plan slot left PENDING above a mark that a killed process did not lower is found again.
    repair();
    return r;
}

std::uint64_t Ledger::trained_prefix(std::uint64_t step) const {
    std::uint64_t j = 0;
    for (; j < header_->plan_slots; ++j) {
        const std::uint64_t w = slot(j).load(memory_order_acquire);
        if (!trained(w) || step_of(w) > step) break;
    }
    return j;
}

// --- status --------------------------------------------------------------------------------

EntryState Ledger::state(std::uint64_t pos) const { return state_of(entry(pos).load(memory_order_acquire)); }

namespace {
Ledger::EntryView view_of(std::uint64_t e) {
    Ledger::EntryView v{state_of(e)};
    if (v.state == EntryState::Consumed || v.state == EntryState::Durable) {
        v.rank = rank_of(e);
        v.step = step_of(e);
    }
    if (v.state == EntryState::Rejected) v.reason = static_cast<RejectReason>(e & 0xff);
    return v;
}
} // namespace

Ledger::EntryView Ledger::view(std::uint64_t pos) const { return view_of(entry(pos).load(memory_order_acquire)); }
Ledger::EntryView Ledger::slot_view(std::uint64_t j) const { return view_of(slot(j).load(memory_order_acquire)); }

LedgerCounts Ledger::counts() const {
    LedgerCounts c;
    for (std::uint64_t p = 0; p < info_.total(); ++p) {
        switch (state_of(entry(p).load(memory_order_relaxed))) {
        case EntryState::Pending: ++c.pending; break;
        case EntryState::InSlot: ++c.in_slot; break;
        case EntryState::Consumed: ++c.consumed; break;
        case EntryState::Durable: ++c.durable; break;
        case EntryState::Rejected: ++c.rejected; break;
        }
    }
    return c;
}

void Ledger::repair() {
    for (std::uint64_t j = 0; j < header_->plan_slots; ++j)
        if (state_of(slot(j).load(memory_order_relaxed)) == EntryState::Pending) {
            lower_low_water(j);
            return;
        }
}

bool Ledger::done() const { return header_->done.load(memory_order_acquire) != 0; }
void Ledger::set_done() {
    header_->done.store(1, memory_order_release);
    header_->pending_seq.fetch_add(1, memory_order_seq_cst);
    shm::futex_wake_all(header_->pending_seq);
}

} // namespace hsring
