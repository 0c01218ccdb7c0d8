// The held-out evaluation board (see hsring/eval_board.hpp).
#include "hsring/eval_board.hpp"

#include "hsring/huge_pages.hpp"
#include "hsring/error.hpp"
#include "shm/region.hpp"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <new>

namespace hsring {

namespace {

constexpr char kMagic[8] = {'H', 'S', 'E', 'V', 'A', 'L', '\0', '\1'};
constexpr std::uint32_t kVersion = 1;
constexpr std::uint64_t kEntriesOffset = 256;

struct EvalHeader {
    char magic[8];
    std::uint32_t version;
    std::uint32_t pad;
    std::uint64_t samples;
    std::uint64_t fingerprint;
    std::int64_t creator_pid;
    alignas(64) std::atomic<std::uint32_t> round;   // wanted now (0 = none)
    std::atomic<std::uint32_t> rounds;              // the last id handed out
    alignas(64) std::atomic<std::uint64_t> cursor;  // where takers start looking (a hint)
};
static_assert(sizeof(EvalHeader) <= kEntriesOffset);

enum State : std::uint64_t { kIdle = 0, kInSlot = 1, kDone = 2 };
constexpr std::uint64_t kTicketMask = (std::uint64_t{1} << 38) - 1;
constexpr std::uint64_t make(std::uint32_t round, State s, std::uint64_t ticket = 0) {
    return (std::uint64_t{round} << 40) | (std::uint64_t{s} << 38) | (ticket & kTicketMask);
}
constexpr std::uint32_t round_of(std::uint64_t e) { return static_cast<std::uint32_t>(e >> 40); }
constexpr State state_of(std::uint64_t e) { return static_cast<State>((e >> 38) & 3); }
constexpr std::uint64_t ticket_of(std::uint64_t e) { return e & kTicketMask; }

EvalHeader& header(shm::Region& r) { return *reinterpret_cast<EvalHeader*>(r.base()); }
std::atomic<std::uint64_t>& entry(shm::Region& r, std::uint64_t i) {
    return reinterpret_cast<std::atomic<std::uint64_t>*>(r.base() + kEntriesOffset)[i];
}

} // namespace

using std::memory_order_acq_rel;
using std::memory_order_acquire;
using std::memory_order_relaxed;

std::string EvalBoard::name_for_ring(std::string_view ring) { return std::string(ring) + "-eval"; }

EvalBoard EvalBoard::create(std::string_view name, std::uint64_t samples, std::uint64_t fingerprint) {
    if (samples == 0) fail("the held-out set has no sample for this machine");
    auto init = [&](std::byte* base) {
        auto* h = new (base) EvalHeader{};
        h->version = kVersion;
        h->samples = samples;
        h->fingerprint = fingerprint;
        h->creator_pid = ::getpid();
        std::memcpy(h->magic, kMagic, sizeof kMagic);  // entries: zero = IDLE in round 0
    };
    EvalBoard b;
    b.region_ = shm::Region::create(name, kEntriesOffset + samples * 8, HugePages::Off, false, init);
    return b;
}

EvalBoard EvalBoard::attach(std::string_view name) {
    EvalBoard b;
    b.region_ = shm::Region::open(name);
    const auto& h = header(*b.region_);
    if (b.region_->size() < kEntriesOffset || std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 ||
        h.version != kVersion || b.region_->size() < kEntriesOffset + h.samples * 8)
        fail("{} is not an evaluation board of this hsring version: remove the run's ring (hsring ring rm) or start "
             "with hsring run --fresh", b.region_->info().path);
    return b;
}

EvalBoard EvalBoard::attach(std::string_view name, std::uint64_t samples, std::uint64_t fingerprint) {
    EvalBoard b = attach(name);
    const auto& h = header(*b.region_);
    const std::string& path = b.region_->info().path;
    if (h.samples != samples || h.fingerprint != fingerprint)
        fail("evaluation board {} belongs to another held-out set ({} samples, fingerprint {:016x}; [data] eval_path "
             "has {}, {:016x}): start over with hsring run --fresh", path, h.samples, h.fingerprint, samples,
             fingerprint);
    return b;
}

bool EvalBoard::exists(std::string_view name) { return !shm::Region::find(name).empty(); }
bool EvalBoard::remove(std::string_view name) { return shm::Region::remove(name); }

EvalBoard::EvalBoard(EvalBoard&&) noexcept = default;
EvalBoard& EvalBoard::operator=(EvalBoard&&) noexcept = default;
EvalBoard::~EvalBoard() = default;

std::uint64_t EvalBoard::samples() const { return header(*region_).samples; }

std::uint32_t EvalBoard::open_round() {
    EvalHeader& h = header(*region_);
    const std::uint32_t id = h.rounds.fetch_add(1, memory_order_acq_rel) + 1;
    HSRING_ASSERT(id < (1u << 24), "evaluation round ids exhausted");
    h.cursor.store(0, memory_order_relaxed);
    // Release: a target that sees the round id also sees the cursor reset.
    h.round.store(id, std::memory_order_release);
    return id;
}

void EvalBoard::close_round() { header(*region_).round.store(0, std::memory_order_release); }

std::uint32_t EvalBoard::round() const { return header(*region_).round.load(memory_order_acquire); }

std::optional<std::uint64_t> EvalBoard::take(std::uint32_t round, std::uint64_t ticket) {
    EvalHeader& h = header(*region_);
    const std::uint64_t n = h.samples;
    // Samples of the round are taken from the cursor on; one that went back to IDLE (its writer
    // died) sits below the cursor, so a pass that finds nothing from the cursor scans all.
    for (int pass = 0; pass < 2; ++pass) {
        const std::uint64_t start = pass == 0 ? h.cursor.load(memory_order_relaxed) : 0;
        for (std::uint64_t i = start; i < n; ++i) {
            std::uint64_t e = entry(*region_, i).load(memory_order_acquire);
            const bool free = round_of(e) < round || (round_of(e) == round && state_of(e) == kIdle);
            if (!free) continue;
            if (entry(*region_, i).compare_exchange_strong(e, make(round, kInSlot, ticket), memory_order_acq_rel)) {
                if (pass == 0) h.cursor.store(i + 1, memory_order_relaxed);
                return i;
            }
        }
    }
    return std::nullopt;
}

void EvalBoard::untake(std::uint64_t index, std::uint32_t round, std::uint64_t ticket) {
    std::uint64_t e = make(round, kInSlot, ticket);
    if (entry(*region_, index).compare_exchange_strong(e, make(round, kIdle), memory_order_acq_rel) &&
        header(*region_).cursor.load(memory_order_relaxed) > index)
        header(*region_).cursor.store(index, memory_order_relaxed);
}

bool EvalBoard::done(std::uint64_t index, std::uint32_t round, std::uint64_t ticket) {
    if (index >= samples()) return false;
    std::uint64_t e = make(round, kInSlot, ticket);
    return entry(*region_, index).compare_exchange_strong(e, make(round, kDone), memory_order_acq_rel);
}

std::uint64_t EvalBoard::repend_ticket(std::uint64_t ticket) {
    std::uint64_t count = 0;
    for (std::uint64_t i = 0; i < samples(); ++i) {
        std::uint64_t e = entry(*region_, i).load(memory_order_acquire);
        if (state_of(e) != kInSlot || ticket_of(e) != (ticket & kTicketMask)) continue;
        if (entry(*region_, i).compare_exchange_strong(e, make(round_of(e), kIdle), memory_order_acq_rel)) ++count;
    }
    return count;
}

} // namespace hsring
