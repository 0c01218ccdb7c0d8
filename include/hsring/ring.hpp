#pragma once
// The hidden-state ring: a named shared-memory region in host RAM holding `slot_count` slots.
// Targets claim a FREE slot, write hidden states into it in place and commit it (READY);
// drafters acquire the oldest READY slot, copy it out and release it (FREE).
//
//   FREE --claim--> WRITING(owner) --commit--> READY --acquire--> READING(owner) --release--> FREE
//                        |  abort / writer died                      | put_back / reader died
//                        v                                           v
//                       FREE                                       READY (same ticket: first again)
//
// Every transition is one CAS on the slot's 64-bit control word, which carries the state and
// the owner (pid + incarnation). No lock in shared memory guards the ring, so a process killed
// at any instant wedges nothing: reclaim(owner) undoes its WRITING and READING slots.
//
// Where a READY slot's bytes are (Copies, chosen by the writer's transport before commit):
//   Host         in the slot's payload in host RAM. The slot outlives its writer.
//   Peer         only in a buffer on the writer's GPU: READY names the writer (pid + incarnation).
//                reclaim(writer) turns it FREE after re-issuing its samples (like WRITING).
//   HostAndPeer  both: reclaim(writer) keeps it READY with the host copy only.
// A READING slot is never touched by its writer's reclaim: its reader checks the writer after its
// copy (owner_alive) and falls back to the host copy or discards the slot.
//
// Thread-safety: a Ring may be shared by the threads of one process; WriteSlot/ReadSlot handles
// belong to one thread at a time. The hot path (claim, commit, acquire, release) never throws:
// it returns an optional or a bool.
#include "hsring/huge_pages.hpp"
#include "hsring/liveness.hpp"
#include "hsring/region_info.hpp"
#include "hsring/ring_geometry.hpp"
#include "hsring/run_tag.hpp"

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hsring {

namespace ring_detail {
struct RingHeader;
struct SlotControl;
struct SlotMetaHeader;
struct OwnerEntry;
} // namespace ring_detail
namespace shm {
class Region;
}

enum class SlotState : std::uint8_t { Free = 0, Writing = 1, Ready = 2, Reading = 3 };
const char* to_string(SlotState s);

// Where a READY slot's bytes are (see the top of this file).
enum class Copies : std::uint8_t { Host = 0, Peer = 1, HostAndPeer = 2 };
const char* to_string(Copies c);

// A process that holds slots: its pid and the incarnation the supervisor gave it.
struct Owner {
    pid_t pid = 0;
    std::uint32_t incarnation = 0;  // 28 bits are stored
    bool operator==(const Owner&) const = default;
};

enum class Role : std::uint32_t { Writer = 1, Reader = 2, Observer = 3 };

struct Occupancy {
    std::uint32_t free = 0, writing = 0, ready = 0, reading = 0;
};

// Running totals kept in the shared header (monotonic, for status and tests).
struct RingCounters {
    std::uint64_t commits = 0, releases = 0, aborts = 0, put_backs = 0;
    std::uint64_t reclaimed_writing = 0, reclaimed_reading = 0, redeliveries = 0;
    std::uint64_t peer_lost = 0;  // READY slots whose only copy died with their writer (freed, samples re-issued)
};

// Per-slot metadata in shared memory: written by the slot's writer between claim and commit,
// read by its reader between acquire and release.
class SlotMeta {
public:
    SlotMeta(ring_detail::SlotMetaHeader* h, const RingGeometry& g);
    std::uint64_t ticket() const;          // claim order; readers take the lowest READY ticket
    std::uint32_t writer_rank() const;
    std::uint32_t n_samples() const;
    std::uint64_t n_tokens() const;
    std::uint64_t checksum() const;
    void set_writer_rank(std::uint32_t r);
    void set_counts(std::uint32_t n_samples, std::uint64_t n_tokens);
    void set_checksum(std::uint64_t c);
    std::span<std::uint64_t> sample_ids();   // max_samples entries
    std::span<std::uint32_t> seq_lens();     // max_samples entries
    std::span<std::int32_t> token_ids();     // slot_tokens entries
    std::span<std::uint8_t> loss_mask();     // slot_tokens entries
    std::span<std::uint8_t> sample_flags();  // max_samples entries, the application's (a rejected sample)
    std::span<std::uint64_t> user();         // 8 words for the application
    std::span<std::byte> transport();        // 192 bytes for the transport (8-byte aligned)

private:
    ring_detail::SlotMetaHeader* h_;
    const RingGeometry* g_;
};

class Ring;

// A claimed slot (WRITING by this process). Destroying it without commit() aborts it.
class WriteSlot {
public:
    WriteSlot(WriteSlot&& o) noexcept;
    WriteSlot& operator=(WriteSlot&&) = delete;
    ~WriteSlot();
    std::uint32_t index() const { return index_; }
    std::uint64_t ticket() const;
    std::span<std::byte> payload();
    SlotMeta meta();
    // Where the bytes will be once committed (default Host). Peer kinds make READY name this
    // process as the holder of a copy on its GPU.
    void set_copies(Copies c);
    // WRITING(me) -> READY. False if the slot was reclaimed under us (we were presumed dead).
    bool commit();
    // WRITING(me) -> FREE.
    bool abort();

private:
    friend class Ring;
    WriteSlot(Ring* r, std::uint32_t i) : ring_(r), index_(i) {}
    Ring* ring_;
    std::uint32_t index_;
};

// An acquired slot (READING by this process). Destroying it without release() puts it back
// (READY again, delivered first): the data is never lost.
class ReadSlot {
public:
    ReadSlot(ReadSlot&& o) noexcept;
    ReadSlot& operator=(ReadSlot&&) = delete;
    ~ReadSlot();
    std::uint32_t index() const { return index_; }
    std::uint64_t ticket() const;
    std::span<const std::byte> payload() const;
    SlotMeta meta() const;
    // Times a reader acquired this commit: 1 = first delivery, more = redelivered after a
    // reader died or put it back.
    std::uint32_t deliveries() const;
    // Where the bytes were when acquired, and the writer holding the GPU copy (Peer kinds; pid 0
    // for Host).
    Copies copies() const;
    Owner holder() const;
    // READING(me) -> FREE.
    bool release();
    // READING(me) -> READY as committed (same ticket).
    bool put_back();
    // The bytes are lost (a peer copy whose writer died): the ring's reclaim hook re-issues the
    // samples, then READING(me) -> FREE.
    bool discard();

private:
    friend class Ring;
    ReadSlot(Ring* r, std::uint32_t i, std::uint64_t acquired) : ring_(r), index_(i), acquired_(acquired) {}
    Ring* ring_;
    std::uint32_t index_;
    std::uint64_t acquired_;  // the READY word it was acquired from
};

struct RingOptions {
    std::string name;         // POSIX-style name, no slashes ("hsring-demo")
    RingGeometry geometry;
    HugePages huge_pages = HugePages::Auto;
    bool prefault = true;     // touch every page at creation (reservation failures surface now)
    RunTag tag;               // whose ring it is (hsring/run_tag.hpp)
};

// A process registered in the ring's owner table (join()), as `hsring status` / `ring rm` see it.
struct OwnerInfo {
    Owner owner;
    Role role = Role::Observer;
    std::string name;
    bool alive = false;  // the pid exists, is not a zombie, and has the recorded start time
};

// What reclaim() undid.
struct ReclaimResult {
    std::vector<std::uint32_t> writing_freed;   // slots WRITING(owner) -> FREE
    std::vector<std::uint64_t> tickets_freed;   // tickets of every freed slot (samples to produce again)
    std::vector<std::uint32_t> reading_returned;// slots READING(owner) -> READY
    std::vector<std::uint32_t> ready_freed;     // slots READY with their only copy on owner's GPU -> FREE
    std::vector<std::uint32_t> ready_to_host;   // slots READY on owner's GPU and in host RAM -> READY (host)
    bool empty() const {
        return writing_freed.empty() && reading_returned.empty() && ready_freed.empty() && ready_to_host.empty();
    }
};

class Ring {
public:
    // Creates the named region (fails if it exists). The region appears under its name only
    // once fully initialised: a crash during creation leaves nothing behind.
    static Ring create(const RingOptions& opts);
    // Attaches to an existing ring. With `expected`, a different layout is an error naming
    // both layouts; with `tag`, a ring of another run (run dir, user, data, machine) is an error
    // saying whose it is; a non-hsring object, another version, another user's file or one that
    // others may access is an error too.
    static Ring attach(std::string_view name, const RingGeometry* expected = nullptr, const RunTag* tag = nullptr);
    static bool exists(std::string_view name);
    // Unlinks the name (mappings stay valid until unmapped). True if something was removed.
    static bool remove(std::string_view name);

    Ring(Ring&&) noexcept;
    Ring& operator=(Ring&&) noexcept;
    ~Ring();  // leaves the owner table if joined; unmaps; never unlinks

    // Registers this process (pid, incarnation) in the owner table; needed before claim/acquire.
    void join(Role role, std::uint32_t incarnation, std::string_view name);
    void leave();
    Owner self() const { return self_; }

    // FREE -> WRITING(me). Waits up to `timeout` (futex; wakes on release/abort/reclaim) for a
    // free slot; nullopt on timeout or when the ring is stopping.
    std::optional<WriteSlot> claim(std::chrono::milliseconds timeout);
    // oldest READY -> READING(me); nullopt on timeout, or when stopping and nothing is READY.
    // With `want`, only READY slots whose metadata it accepts count (a reader that trains slots in
    // an order of its own; the metadata of a READY slot is the committed one while it is READY).
    using SlotFilter = std::function<bool(const SlotMeta&)>;
    std::optional<ReadSlot> acquire(std::chrono::milliseconds timeout, const SlotFilter& want = {});

    // Undoes `owner`'s slots: WRITING -> FREE, READING -> READY, and the READY slots whose bytes
    // are on its GPU (see Copies). For each slot turning FREE, `before_free(ticket)` runs first
    // (so the samples it held are re-issued even if the reclaimer dies midway).
    // Safe to call concurrently and repeatedly (idempotent).
    ReclaimResult reclaim(Owner owner, const std::function<void(std::uint64_t ticket)>& before_free = {});
    // Reclaims every owner whose process is gone (pid gone, or reused: start time differs), and
    // frees owner entries left half-joined by a process that died.
    ReclaimResult reclaim_dead(const std::function<void(std::uint64_t ticket)>& before_free = {});
    // Called by waits that time out, to reclaim dead owners without the supervisor.
    void set_reclaim_hook(std::function<void(std::uint64_t ticket)> before_free);
    const std::function<void(std::uint64_t ticket)>& reclaim_hook() const { return reclaim_hook_; }

    // Writers stop claiming; readers drain what is READY. Shared: every process sees it.
    void set_stopping(bool stopping);
    bool stopping() const;

    Occupancy occupancy() const;
    RingCounters counters() const;
    // The owner table: every process that joined and has not left (or been reclaimed); an entry
    // being joined shows as "(joining)".
    std::vector<OwnerInfo> owners() const;
    SlotState state(std::uint32_t slot) const;
    std::uint64_t ticket(std::uint32_t slot) const;  // of its current (or last) claim
    // Bumped by every transition to FREE; wait_free() sleeps until it moves past `seen` (or the
    // timeout): a writer waiting for readers to let go of something (a peer copy's buffer).
    std::uint32_t free_sequence() const;
    void wait_free(std::uint32_t seen, std::chrono::milliseconds timeout);
    std::optional<Owner> owner_of(std::uint32_t slot) const;
    // The writer holding the GPU copy of a READY slot's commit (peer kinds); nullopt for a slot
    // that is not READY or whose bytes are in the host ring only.
    std::optional<Owner> holder_of(std::uint32_t slot) const;
    // True while `o` is in the owner table and its process is alive (same start time). A peer
    // copy is valid while its holder is: a holder that left or died took its GPU buffers along.
    bool owner_alive(Owner o) const;
    const RingGeometry& geometry() const { return geometry_; }
    const RegionInfo& region() const;
    const std::string& name() const { return name_; }
    pid_t creator_pid() const;
    std::uint64_t creator_start_ticks() const;
    RunTag tag() const;
    // The live processes that use the ring: its creator (if alive, same start time) and every
    // live owner-table entry (workers, and the supervisor that joined as an observer), except
    // this process. `hsring run --fresh` and `hsring ring rm` never remove a ring in use.
    std::vector<OwnerInfo> live_users() const;

    std::byte* payload(std::uint32_t slot) const;
    SlotMeta meta(std::uint32_t slot) const;
    // The payload area (all slots, 2 MiB aligned) for CUDA registration.
    std::span<std::byte> payload_area() const;

private:
    friend class WriteSlot;
    friend class ReadSlot;
    Ring() = default;
    void bind(std::unique_ptr<shm::Region> region);
    ring_detail::SlotControl& control(std::uint32_t slot) const;
    ring_detail::SlotMetaHeader* meta_header(std::uint32_t slot) const;
    bool transition(std::uint32_t slot, std::uint64_t from, std::uint64_t to);
    bool finish_write(std::uint32_t slot, bool commit);
    bool finish_read(std::uint32_t slot, bool release);
    bool discard_read(std::uint32_t slot);
    void maybe_reclaim_on_timeout();

    std::string name_;
    std::unique_ptr<shm::Region> region_;
    ring_detail::RingHeader* header_ = nullptr;
    RingGeometry geometry_;
    Owner self_;
    int owner_index_ = -1;
    std::uint32_t claim_hint_ = 0;
    std::function<void(std::uint64_t)> reclaim_hook_;
    std::chrono::steady_clock::time_point last_reclaim_check_{};
};

// Fault injection for tests: called at each transition point ("claim", "commit.before",
// "commit.after", "acquire", "release.before", "release.after", "abort.before") and in join()
// once its owner entry is reserved ("join.reserved"). Default: none.
using RingTestHook = void (*)(const char* point);
void set_ring_test_hook(RingTestHook hook);

} // namespace hsring
