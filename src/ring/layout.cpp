// The ring's layout: its geometry (hash, config), the offsets of each part of the region,
// where a slot's control word, metadata and payload are, and the SlotMeta accessors.
#include "hsring/ring.hpp"

#include "hsring/error.hpp"
#include "hsring/units.hpp"
#include "ring/layout.hpp"
#include "shm/region.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace hsring {

using namespace ring_detail;

namespace {

std::uint64_t fnv1a(std::uint64_t h, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

} // namespace

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
    o.slot_stride = g.payload_stride();
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

// --- where a slot's parts are ------------------------------------------------------------

SlotControl& Ring::control(std::uint32_t slot) const {
    return *reinterpret_cast<SlotControl*>(region_->base() + header_->controls_offset + slot * sizeof(SlotControl));
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

} // namespace hsring
