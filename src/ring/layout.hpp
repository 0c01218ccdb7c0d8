#pragma once
// The ring's shared-memory layout. Every type here is standard-layout, holds offsets (never
// pointers) and only lock-free, address-free atomics, so any process mapping the region at any
// address reads it the same way.
//
//  offset 0 ┌───────────────────────────────────────────────────────────────┐
//           │ RingHeader (4 KiB)                                            │
//           │   identity: magic "HSRING\0\1", version, layout hash,         │
//           │             creator pid + start ticks, created time, name,    │
//           │             run tag (run dir, uid, data, machine)             │
//           │   geometry: slot count, slot stride, tokens, samples, ...     │
//           │   offsets:  owners, controls, metas, payloads, total bytes    │
//           │   [own line] next_ticket         [own line] free/ready futex  │
//           │   [own line] stopping flag       [own line] counters          │
//  owners   ├───────────────────────────────────────────────────────────────┤
//           │ OwnerEntry[kMaxOwners]  (64 B each: token, start ticks, role) │
//  controls ├───────────────────────────────────────────────────────────────┤
//           │ SlotControl[slot_count] (128 B each: the control word, the    │
//           │   ticket and the READY word of the commit on one line,        │
//           │   nothing else on the pair of lines)                          │
//  metas    ├───────────────────────────────────────────────────────────────┤
//           │ slot 0 metadata: SlotMetaHeader (+ 192 B of transport words)  │
//           │   | sample_ids[max_samples] u64                               │
//           │   | seq_lens[max_samples] u32 | sample_flags[max_samples] u8 │
//           │   | token_ids[slot_tokens] i32 | loss_mask[slot_tokens] u8    │
//           │     (meta_stride bytes, 4 KiB aligned)                        │
//           │ slot 1 metadata ...                                           │
//  payloads ├───────────────────────────────────────────────────────────────┤ 2 MiB aligned
//           │ slot 0 payload [n_layers][slot_tokens][hidden] (slot_stride)  │
//           │ slot 1 payload ...                                            │
//           └───────────────────────────────────────────────────────────────┘
//
// Control word (64 bits): [ pid : 32 | incarnation : 28 | state : 4 ]. FREE and READY carry no
// owner (pid 0). A slot's ticket (claim order, from next_ticket, 0 = none) sits next to it.
// READY comes in three raw states, by where the bytes are (Copies): READY (host payload, no
// owner), READY_PEER and READY_BOTH, whose owner field names the writer holding a copy on its GPU:
// the exact word makes every reclaim CAS of a dead writer's READY slot immune to ABA, because
// (pid, incarnation) never repeats within a ring.
#include "hsring/ring.hpp"
#include "shm/run_tag_block.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace hsring::ring_detail {

inline constexpr char kMagic[8] = {'H', 'S', 'R', 'I', 'N', 'G', '\0', '\1'};
// 2: the run tag (whose ring it is) in the header; owner entries being joined carry the joiner's pid.
// 3: READY_PEER / READY_BOTH states, the READY word of a commit, transport words in the metadata.
// 4: per-sample flags in the metadata (a target's rejected samples).
inline constexpr std::uint32_t kVersion = 4;
inline constexpr std::uint32_t kMaxOwners = 128;
inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kHeaderBytes = 4096;
inline constexpr std::size_t kMetaAlign = 4096;
inline constexpr std::size_t kTransportWords = 24;

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// --- control words -----------------------------------------------------------------------
// The states a control word stores: SlotState's four, and the two READY variants of a peer copy.
enum class RawState : std::uint8_t { Free = 0, Writing = 1, Ready = 2, Reading = 3, ReadyPeer = 4, ReadyBoth = 5 };

constexpr std::uint64_t make_raw(RawState s, Owner o = {}) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(o.pid)) << 32) |
           (static_cast<std::uint64_t>(o.incarnation & 0x0fffffffu) << 4) | static_cast<std::uint64_t>(s);
}
constexpr std::uint64_t make_word(SlotState s, Owner o = {}) { return make_raw(static_cast<RawState>(s), o); }
constexpr RawState raw_state(std::uint64_t w) { return static_cast<RawState>(w & 0xf); }
constexpr bool is_peer_ready(std::uint64_t w) {
    return raw_state(w) == RawState::ReadyPeer || raw_state(w) == RawState::ReadyBoth;
}
constexpr SlotState word_state(std::uint64_t w) {
    return is_peer_ready(w) ? SlotState::Ready : static_cast<SlotState>(w & 0xf);
}
// The READY word a commit by `writer` publishes for its copies.
constexpr std::uint64_t ready_word(Copies c, Owner writer) {
    switch (c) {
    case Copies::Peer: return make_raw(RawState::ReadyPeer, writer);
    case Copies::HostAndPeer: return make_raw(RawState::ReadyBoth, writer);
    case Copies::Host: break;
    }
    return make_word(SlotState::Ready);
}
constexpr Copies copies_of(std::uint64_t ready) {
    return raw_state(ready) == RawState::ReadyPeer   ? Copies::Peer
           : raw_state(ready) == RawState::ReadyBoth ? Copies::HostAndPeer
                                                     : Copies::Host;
}
constexpr Owner word_owner(std::uint64_t w) {
    return Owner{static_cast<pid_t>(w >> 32), static_cast<std::uint32_t>((w >> 4) & 0x0fffffffu)};
}
constexpr std::uint64_t owner_token(Owner o) { return make_word(SlotState::Free, o); }

struct alignas(kCacheLine) SlotControl {
    std::atomic<std::uint64_t> word;    // state + owner; every transition is a CAS on it
    // Written by the owner of a WRITING slot before the commit CAS (release), read by readers
    // after observing READY (acquire): so a reader sees the ticket of the commit it observed.
    std::atomic<std::uint64_t> ticket;
    std::atomic<std::uint32_t> deliveries;  // acquires of the current commit (redelivery count)
    std::uint32_t reserved_;
    // The READY word of the current commit (where its bytes are, and the writer holding a peer
    // copy): set by the writer between claim and commit (claim resets it to host READY), read
    // by put_back and by the reclaim of a dead reader to make the slot READY again as committed.
    std::atomic<std::uint64_t> ready_word;
    char pad_[2 * kCacheLine - 32];     // two lines: adjacent-line prefetch never false-shares
};
static_assert(sizeof(SlotControl) == 128);

struct alignas(kCacheLine) OwnerEntry {
    // owner_token(pid, incarnation), 0 = empty. Claimed by CAS 0 -> token, cleared by the owner
    // on leave() or by a reclaimer after it reclaimed a dead owner's slots.
    std::atomic<std::uint64_t> token;
    std::uint64_t start_ticks;          // /proc/PID/stat starttime: detects a reused pid
    std::uint32_t role;
    char name[36];
};
static_assert(sizeof(OwnerEntry) == 64);

struct SlotMetaHeader {
    std::uint64_t ticket;
    std::uint32_t writer_rank;
    std::uint32_t n_samples;
    std::uint64_t n_tokens;
    std::uint64_t checksum;
    std::uint64_t user[8];
    std::uint64_t transport[kTransportWords];  // the transport's (peer: where the writer's copy is)
};

struct RingHeader {
    // identity (written once by the creator before the region becomes visible by name)
    char magic[8];
    std::uint32_t version;
    std::uint32_t header_bytes;
    std::uint64_t layout_hash;
    std::int64_t creator_pid;
    std::uint64_t creator_start_ticks;
    std::int64_t created_unix_ns;
    char name[64];
    shm::RunTagBlock tag;
    // geometry
    std::uint32_t slot_count;
    std::uint32_t max_samples;
    std::uint64_t slot_bytes;
    std::uint64_t slot_stride;
    std::uint64_t slot_tokens;
    std::uint32_t n_layers;
    std::uint32_t hidden;
    std::uint32_t dtype_bytes;
    std::uint32_t huge_pages;
    // offsets from the region start
    std::uint64_t owners_offset;
    std::uint64_t controls_offset;
    std::uint64_t metas_offset;
    std::uint64_t meta_stride;
    std::uint64_t payloads_offset;
    std::uint64_t total_bytes;

    alignas(kCacheLine) std::atomic<std::uint64_t> next_ticket;
    // Futex words: bumped on every transition to FREE (free_seq) or READY (ready_seq); waiters
    // sleep on the value they saw before their last scan, so no wake-up is lost.
    alignas(kCacheLine) std::atomic<std::uint32_t> free_seq;
    std::atomic<std::uint32_t> free_waiters;
    alignas(kCacheLine) std::atomic<std::uint32_t> ready_seq;
    std::atomic<std::uint32_t> ready_waiters;
    alignas(kCacheLine) std::atomic<std::uint32_t> stopping;
    alignas(kCacheLine) std::atomic<std::uint64_t> commits;
    std::atomic<std::uint64_t> releases;
    std::atomic<std::uint64_t> aborts;
    std::atomic<std::uint64_t> put_backs;
    std::atomic<std::uint64_t> reclaimed_writing;
    std::atomic<std::uint64_t> reclaimed_reading;
    std::atomic<std::uint64_t> redeliveries;
    std::atomic<std::uint64_t> peer_lost;
};
static_assert(sizeof(RingHeader) <= kHeaderBytes);
static_assert(std::is_standard_layout_v<RingHeader>);
static_assert(std::is_standard_layout_v<SlotControl>);
static_assert(std::is_standard_layout_v<OwnerEntry>);
static_assert(std::is_standard_layout_v<SlotMetaHeader>);

// Offsets of the metadata arrays inside one slot's metadata block.
struct MetaLayout {
    std::uint64_t sample_ids, seq_lens, sample_flags, token_ids, loss_mask, stride;
    static MetaLayout of(const RingGeometry& g);
};

struct Offsets {
    std::uint64_t owners, controls, metas, meta_stride, payloads, slot_stride, total;
    static Offsets of(const RingGeometry& g);
};

} // namespace hsring::ring_detail
