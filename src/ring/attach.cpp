// A Ring object and its mapping: create (initialise the header), attach (check magic, version,
// layout and run tag), bind, move, destroy, and the creator's identity.
#include "hsring/ring.hpp"

#include "hsring/error.hpp"
#include "ring/layout.hpp"
#include "shm/region.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <utility>

namespace hsring {

using namespace ring_detail;
using shm::Region;

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

} // namespace hsring
