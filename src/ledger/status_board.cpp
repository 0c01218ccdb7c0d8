// The worker status board (see hsring/status_board.hpp).
#include "hsring/status_board.hpp"

#include "hsring/huge_pages.hpp"
#include "hsring/error.hpp"
#include "shm/region.hpp"
#include "shm/run_tag_block.hpp"

#include <unistd.h>

#include <atomic>
#include <bit>
#include <cstring>
#include <ctime>
#include <new>

namespace hsring {

namespace {

constexpr char kMagic[8] = {'H', 'S', 'S', 'T', 'A', 'T', 'S', '\1'};
// 2: the run tag (whose board it is: hsring/run_tag.hpp) in a larger header.
constexpr std::uint32_t kVersion = 2;
constexpr std::uint64_t kEntriesOffset = 512;

struct StatusHeader {
    char magic[8];
    std::uint32_t version;
    std::uint32_t entries;
    std::int64_t creator_pid;
    shm::RunTagBlock tag;
};
static_assert(sizeof(StatusHeader) <= kEntriesOffset);

struct StatsEntry {
    std::atomic<std::uint64_t> w[16];  // WorkerStats fields, see publish()
};
static_assert(sizeof(StatsEntry) == 128);

constexpr std::uint64_t kBytes = kEntriesOffset + StatusBoard::kMaxWorkers * sizeof(StatsEntry);

StatsEntry& entry(std::byte* base, std::uint32_t i) {
    HSRING_ASSERT(i < StatusBoard::kMaxWorkers, "stats index {}", i);
    return *reinterpret_cast<StatsEntry*>(base + kEntriesOffset + i * sizeof(StatsEntry));
}

} // namespace

// Relaxed everywhere: each word has one writer and readers want recent numbers, not an ordering
// with anything else in shared memory.
using std::memory_order_relaxed;

std::string StatusBoard::name_for_ring(std::string_view ring) { return std::string(ring) + "-status"; }

StatusBoard StatusBoard::create(std::string_view name, const RunTag& tag) {
    auto init = [&tag](std::byte* base) {
        auto* h = new (base) StatusHeader{};
        h->version = kVersion;
        h->tag.store(tag);
        h->entries = kMaxWorkers;
        h->creator_pid = ::getpid();
        for (std::uint32_t i = 0; i < kMaxWorkers; ++i) new (base + kEntriesOffset + i * sizeof(StatsEntry)) StatsEntry{};
        std::memcpy(h->magic, kMagic, sizeof kMagic);
    };
    StatusBoard b;
    b.region_ = shm::Region::create(name, kBytes, HugePages::Off, false, init);
    return b;
}

StatusBoard StatusBoard::attach(std::string_view name, const RunTag* tag) {
    StatusBoard b;
    b.region_ = shm::Region::open(name);
    const auto* h = reinterpret_cast<const StatusHeader*>(b.region_->base());
    const std::string& path = b.region_->info().path;
    if (b.region_->size() < sizeof(StatusHeader) || std::memcmp(h->magic, kMagic, sizeof kMagic) != 0)
        fail("{} is not an hsring status board (bad magic): remove it (hsring ring rm)", path);
    if (h->version != kVersion || h->entries != kMaxWorkers || b.region_->size() < kBytes)
        fail("status board {} has version {} with {} entries, this hsring uses version {} with {}: remove it "
             "(hsring ring rm)", path, h->version, h->entries, kVersion, kMaxWorkers);
    if (tag) {
        const RunTag found = h->tag.load();
        if (!tag->differences(found).empty())
            refuse_foreign("status board", name, path, found, *tag, name.substr(0, name.size() - std::string_view("-status").size()));
    }
    return b;
}

bool StatusBoard::exists(std::string_view name) { return !shm::Region::find(name).empty(); }
bool StatusBoard::remove(std::string_view name) { return shm::Region::remove(name); }

StatusBoard::StatusBoard(StatusBoard&&) noexcept = default;
StatusBoard& StatusBoard::operator=(StatusBoard&&) noexcept = default;
StatusBoard::~StatusBoard() = default;

void StatusBoard::publish(std::uint32_t index, const WorkerStats& s) {
    StatsEntry& e = entry(region_->base(), index);
    auto put = [&](int i, std::uint64_t v) { e.w[i].store(v, memory_order_relaxed); };
    put(0, (std::uint64_t{s.role} << 32) | s.rank);
    put(1, (std::uint64_t(static_cast<std::uint32_t>(s.pid)) << 32) | s.incarnation);
    put(2, s.slots);
    put(3, s.samples);
    put(4, s.tokens);
    put(5, s.busy_ns);
    put(6, s.wait_ns);
    put(7, s.step);
    put(8, std::bit_cast<std::uint64_t>(s.loss));
    put(9, std::bit_cast<std::uint64_t>(s.accept_len));
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    put(10, static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec));
}

WorkerStats StatusBoard::stats(std::uint32_t index) const {
    StatsEntry& e = entry(region_->base(), index);
    auto get = [&](int i) { return e.w[i].load(memory_order_relaxed); };
    WorkerStats s;
    s.role = static_cast<std::uint32_t>(get(0) >> 32);
    s.rank = static_cast<std::uint32_t>(get(0));
    s.pid = static_cast<std::int32_t>(get(1) >> 32);
    s.incarnation = static_cast<std::uint32_t>(get(1));
    s.slots = get(2);
    s.samples = get(3);
    s.tokens = get(4);
    s.busy_ns = get(5);
    s.wait_ns = get(6);
    s.step = get(7);
    s.loss = std::bit_cast<double>(get(8));
    s.accept_len = std::bit_cast<double>(get(9));
    s.heartbeat_ns = get(10);
    return s;
}

void StatusBoard::clear_stats(std::uint32_t index) {
    StatsEntry& e = entry(region_->base(), index);
    for (auto& w : e.w) w.store(0, memory_order_relaxed);
}

} // namespace hsring
