// The peer transport's state logic, without CUDA: who holds a READY slot's bytes and what becomes
// of them when that process dies (real processes, killed), which of a writer's buffers may take
// the next batch, which imported handles stay valid, which GPUs a peer drafter sees.
#include "hsring/error.hpp"
#include "hsring/ledger.hpp"
#include "hsring/ring.hpp"
#include "ring_test_util.hpp"
#include "transport/peer_buffers.hpp"
#include "transport/peer_imports.hpp"
#include "transport/peer_ref.hpp"
#include "transport/visible_devices.hpp"

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

using namespace hsring;
using namespace hsring::transport;
using namespace std::chrono_literals;

namespace {

struct TempRing {
    std::string name;
    Ring ring;
    explicit TempRing(RingGeometry g = test::small_geometry(6))
        : name(test::unique_ring_name("peer")), ring(Ring::create({name, g, HugePages::Off, true})) {}
    ~TempRing() { Ring::remove(name); }
};

// A second process-local view of the ring, joined as another owner (pid, incarnation).
Ring joined(const std::string& name, Role role, std::uint32_t incarnation) {
    Ring r = Ring::attach(name);
    r.join(role, incarnation, role == Role::Writer ? "writer" : "reader");
    return r;
}

// Commits one slot with `copies` and a checksummed payload; returns its ticket.
std::uint64_t commit(Ring& w, Copies copies, std::uint64_t id) {
    auto s = w.claim(0ms);
    REQUIRE(s);
    s->meta().set_checksum(test::fill_pattern(s->payload().first(4096), id));
    s->meta().user()[0] = id;
    s->set_copies(copies);
    const std::uint64_t t = s->ticket();
    REQUIRE(s->commit());
    return t;
}

// A child process that joins the ring as a writer (incarnation `inc`), commits one slot per entry
// of `copies`, reports the tickets through a pipe, then sleeps until killed; or, with `leave`,
// leaves the ring and exits 0 (a graceful exit).
struct Holder {
    pid_t pid = 0;
    std::vector<std::uint64_t> tickets;
    Owner owner;
};

Holder spawn_holder(const std::string& ring, std::uint32_t inc, const std::vector<Copies>& copies, bool leave = false) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::close(fds[0]);
        Ring r = joined(ring, Role::Writer, inc);
        std::vector<std::uint64_t> t;
        for (std::size_t i = 0; i < copies.size(); ++i) t.push_back(commit(r, copies[i], 1000 + i));
        if (::write(fds[1], t.data(), t.size() * 8) != static_cast<ssize_t>(t.size() * 8)) ::_exit(3);
        if (leave) {
            r.leave();
            ::_exit(0);
        }
        for (;;) ::pause();
    }
    ::close(fds[1]);
    Holder h;
    h.pid = pid;
    h.owner = Owner{pid, inc};
    h.tickets.resize(copies.size());
    std::size_t got = 0;
    while (got < copies.size() * 8) {
        const ssize_t n = ::read(fds[0], reinterpret_cast<char*>(h.tickets.data()) + got, copies.size() * 8 - got);
        REQUIRE(n > 0);
        got += static_cast<std::size_t>(n);
    }
    ::close(fds[0]);
    return h;
}

void kill_and_reap(pid_t pid) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
}

} // namespace

TEST_CASE("a READY slot says where its bytes are and which writer holds the GPU copy; put_back keeps it so") {
    TempRing t;
    Ring w = joined(t.name, Role::Writer, 7);
    Ring r = joined(t.name, Role::Reader, 8);
    commit(w, Copies::Peer, 1);
    commit(w, Copies::HostAndPeer, 2);
    commit(w, Copies::Host, 3);
    CHECK(t.ring.occupancy().ready == 3);

    auto a = r.acquire(0ms);
    REQUIRE(a);
    CHECK(a->copies() == Copies::Peer);
    CHECK(a->holder() == w.self());
    CHECK(a->put_back());
    auto a2 = r.acquire(0ms);  // the same slot again (oldest ticket), as committed
    REQUIRE(a2);
    CHECK(a2->meta().user()[0] == 1);
    CHECK(a2->copies() == Copies::Peer);
    CHECK(a2->holder() == w.self());
    auto b = r.acquire(0ms);
    REQUIRE(b);
    CHECK(b->copies() == Copies::HostAndPeer);
    CHECK(b->holder() == w.self());
    auto c = r.acquire(0ms);
    REQUIRE(c);
    CHECK(c->copies() == Copies::Host);
    CHECK(c->holder().pid == 0);
    a2->release();
    b->release();
    c->release();

    // The next claim of a slot starts from host again: copies are per commit.
    for (int i = 0; i < 6; ++i) commit(w, Copies::Host, 10 + i);
    for (int i = 0; i < 6; ++i) {
        auto s = r.acquire(0ms);
        REQUIRE(s);
        CHECK(s->copies() == Copies::Host);
        s->release();
    }
}

TEST_CASE("a writer's reclaim frees its peer-only READY slots after re-issuing their samples, keeps its peer+host ones as host READY, and leaves READING ones to their reader") {
    TempRing t;
    Ring w = joined(t.name, Role::Writer, 3);
    Ring r = joined(t.name, Role::Reader, 4);
    commit(w, Copies::Peer, 4);  // the oldest: acquired now, READING when the writer is reclaimed
    auto held_slot = r.acquire(0ms);
    REQUIRE(held_slot);
    ReadSlot held = std::move(*held_slot);
    const std::uint64_t peer = commit(w, Copies::Peer, 1);
    const std::uint64_t both = commit(w, Copies::HostAndPeer, 2);
    const std::uint64_t host = commit(w, Copies::Host, 3);
    std::vector<std::uint64_t> reissued;
    const ReclaimResult res = t.ring.reclaim(w.self(), [&](std::uint64_t ticket) { reissued.push_back(ticket); });
    CHECK(res.ready_freed.size() == 1);
    CHECK(res.ready_to_host.size() == 1);
    CHECK(reissued == std::vector<std::uint64_t>{peer});
    CHECK(std::find(res.tickets_freed.begin(), res.tickets_freed.end(), peer) != res.tickets_freed.end());
    CHECK(t.ring.counters().peer_lost == 1);
    CHECK(t.ring.state(held.index()) == SlotState::Reading);  // its reader decides
    CHECK(t.ring.reclaim(w.self()).empty());  // idempotent

    // What is left READY: the host slot and the peer+host one, now host only.
    std::set<std::uint64_t> tickets;
    for (int i = 0; i < 2; ++i) {
        auto s = r.acquire(0ms);
        REQUIRE(s);
        CHECK(s->copies() == Copies::Host);
        CHECK(s->holder().pid == 0);
        tickets.insert(s->ticket());
        s->release();
    }
    CHECK(tickets == std::set<std::uint64_t>{both, host});
    CHECK(!r.acquire(0ms));

    // The reader finds the holder gone and discards the slot: samples re-issued, slot FREE.
    CHECK(!r.owner_alive(held.holder()));
    r.set_reclaim_hook([&](std::uint64_t ticket) { reissued.push_back(ticket); });
    const std::uint64_t held_ticket = held.ticket();
    const std::uint32_t index = held.index();
    CHECK(held.discard());
    CHECK(reissued.back() == held_ticket);
    CHECK(t.ring.state(index) == SlotState::Free);
    CHECK(t.ring.counters().peer_lost == 2);
}

TEST_CASE("a reader that dies holding a peer slot gives it back READY as committed, naming its writer") {
    TempRing t;
    Ring w = joined(t.name, Role::Writer, 5);
    Ring r = joined(t.name, Role::Reader, 6);
    commit(w, Copies::HostAndPeer, 1);
    auto s = r.acquire(0ms);
    REQUIRE(s);
    const ReclaimResult res = t.ring.reclaim(r.self());
    CHECK(res.reading_returned.size() == 1);
    s.reset();  // (its put_back finds the slot no longer ours: nothing happens)
    Ring r2 = joined(t.name, Role::Reader, 9);
    auto again = r2.acquire(0ms);
    REQUIRE(again);
    CHECK(again->copies() == Copies::HostAndPeer);
    CHECK(again->holder() == w.self());
    CHECK(again->deliveries() == 2);
}

TEST_CASE("a SIGKILLed target's READY peer slots: the peer-only ones go back to PENDING samples through the ledger, the peer+host ones stay READY with the host copy") {
    TempRing t;
    const std::string ledger_name = t.name + "-ledger";
    LedgerInfo info;
    info.samples = 8;
    info.dataset_samples = 8;
    std::vector<std::uint64_t> plan{0, 1, 2, 3, 4, 5, 6, 7, 8};  // one sample per plan slot
    Ledger ledger = Ledger::create(ledger_name, info, plan);
    struct RemoveLedger {
        std::string n;
        ~RemoveLedger() { Ledger::remove(n); }
    } cleanup{ledger_name};

    Holder h = spawn_holder(t.name, 11, {Copies::Peer, Copies::HostAndPeer, Copies::Peer});
    // The plan slots the target took under each slot's ticket (what the target loop does).
    std::vector<std::uint64_t> pos;
    for (std::uint64_t ticket : h.tickets) {
        auto p = ledger.take_slot(ticket, ~std::uint64_t{0});
        REQUIRE(p);
        pos.push_back(*p);
    }
    CHECK(t.ring.owner_alive(h.owner));
    kill_and_reap(h.pid);
    CHECK(!t.ring.owner_alive(h.owner));

    // The drafter's acquire never hands out a dead target's peer copy: it reclaims that target
    // (the ring's reclaim hook re-issues the samples) and delivers the host copy.
    Ring r = joined(t.name, Role::Reader, 12);
    r.set_reclaim_hook([&](std::uint64_t ticket) { ledger.repend_ticket(ticket); });
    auto s = r.acquire(0ms);
    REQUIRE(s);
    CHECK(s->ticket() == h.tickets[1]);
    CHECK(s->copies() == Copies::Host);
    CHECK(test::checksum(s->payload().first(4096)) == s->meta().checksum());
    CHECK(ledger.consume_slot(pos[1], h.tickets[1], 0, 1));
    s->release();
    CHECK(!r.acquire(0ms));
    CHECK(ledger.state(pos[0]) == EntryState::Pending);
    CHECK(ledger.state(pos[2]) == EntryState::Pending);
    CHECK(t.ring.counters().peer_lost == 2);
    CHECK(t.ring.occupancy().free == t.ring.geometry().slot_count);
}

TEST_CASE("the supervisor's reclaim of dead owners covers READY peer slots, also of a target that left (its buffers went with it)") {
    TempRing t;
    Holder killed = spawn_holder(t.name, 21, {Copies::Peer});
    Holder left = spawn_holder(t.name, 22, {Copies::Peer, Copies::HostAndPeer}, /*leave=*/true);
    ::waitpid(left.pid, nullptr, 0);
    kill_and_reap(killed.pid);
    std::vector<std::uint64_t> reissued;
    const ReclaimResult res = t.ring.reclaim_dead([&](std::uint64_t ticket) { reissued.push_back(ticket); });
    CHECK(res.ready_freed.size() == 2);
    CHECK(res.ready_to_host.size() == 1);
    std::sort(reissued.begin(), reissued.end());
    CHECK(reissued == std::vector<std::uint64_t>{killed.tickets[0], left.tickets[0]});
    CHECK(t.ring.occupancy().ready == 1);
    CHECK(t.ring.reclaim_dead().empty());
}

TEST_CASE("a writer's buffer is free again only once its slot let go of that commit") {
    TempRing t(test::small_geometry(4));
    Ring w = joined(t.name, Role::Writer, 1);
    Ring r = joined(t.name, Role::Reader, 2);
    PeerBuffers pool(2);
    CHECK(pool.find_free(t.ring) == 0u);
    auto put = [&](std::uint32_t b) {
        auto s = w.claim(0ms);
        REQUIRE(s);
        pool.hold(b, s->index(), s->ticket());
        s->set_copies(Copies::Peer);
        REQUIRE(s->commit());
    };
    put(0);
    CHECK(pool.find_free(t.ring) == 1u);
    put(1);
    CHECK(!pool.find_free(t.ring));  // both READY
    CHECK(pool.busy(t.ring) == 2);
    auto s = r.acquire(0ms);  // the batch of buffer 0
    REQUIRE(s);
    CHECK(!pool.find_free(t.ring));  // READING: a reader may be copying from it
    const std::uint32_t seen = t.ring.free_sequence();
    s->release();
    CHECK(t.ring.free_sequence() != seen);
    CHECK(pool.find_free(t.ring) == 0u);
    // That slot claimed again (another ticket): still free for us.
    auto other = w.claim(0ms);
    REQUIRE(other);
    CHECK(pool.find_free(t.ring) == 0u);
    other->abort();

    // A writer waiting for a buffer wakes up when a reader releases one.
    put(0);
    CHECK(!pool.find_free(t.ring));
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        Ring rr = joined(t.name, Role::Reader, 3);
        std::this_thread::sleep_for(200ms);
        auto x = rr.acquire(0ms);
        if (!x) ::_exit(2);
        x->release();
        ::_exit(0);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const auto b = pool.wait_free(t.ring, 10s);
    CHECK(b.has_value());
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    int st = 0;
    ::waitpid(child, &st, 0);
    CHECK(WEXITSTATUS(st) == 0);
}

TEST_CASE("a writer waiting for a buffer stops waiting when the ring is stopping or its worker's stop flag is set") {
    // Only drafters free a buffer: with none left (a stop, drafters gone) a writer waited forever.
    TempRing t(test::small_geometry(4));
    Ring w = joined(t.name, Role::Writer, 1);
    PeerBuffers pool(1);
    auto s = w.claim(0ms);
    REQUIRE(s);
    pool.hold(0, s->index(), s->ticket());
    s->set_copies(Copies::Peer);
    REQUIRE(s->commit());
    REQUIRE(!pool.find_free(t.ring));

    // The worker's stop flag (SIGTERM), set while it waits.
    std::atomic<bool> stop{false};
    std::thread flag([&] {
        std::this_thread::sleep_for(200ms);
        stop = true;
    });
    auto t0 = std::chrono::steady_clock::now();
    CHECK(!pool.wait_free(t.ring, 30s, [&] { return stop.load(); }));
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    flag.join();

    // `hsring stop` from another process: set_stopping wakes the wait at once.
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        Ring r = Ring::attach(t.name);
        std::this_thread::sleep_for(200ms);
        r.set_stopping(true);
        ::_exit(0);
    }
    t0 = std::chrono::steady_clock::now();
    CHECK(!pool.wait_free(t.ring, 30s));
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    ::waitpid(child, nullptr, 0);
    CHECK(!pool.wait_free(t.ring, 30s));  // already stopping: no wait at all

    // A free buffer is still handed out while stopping (the batch may be written).
    t.ring.set_stopping(false);
    Ring r = joined(t.name, Role::Reader, 2);
    auto a = r.acquire(0ms);
    REQUIRE(a);
    a->release();
    t.ring.set_stopping(true);
    CHECK(pool.wait_free(t.ring, 30s) == 0u);
}

TEST_CASE("imports: once per (target, incarnation); a restarted or dead target's handles are closed before any other use") {
    std::vector<std::string> log;
    int opened = 0;
    PeerImports imports({[&](const PeerRef& ref) {
                             log.push_back("open " + std::to_string(ref.buffer));
                             return Imported{reinterpret_cast<void*>(static_cast<std::uintptr_t>(++opened)), nullptr};
                         },
                         [&](const Imported& imp) {
                             log.push_back("close " + std::to_string(reinterpret_cast<std::uintptr_t>(imp.memory)));
                         }});
    PeerRef b0, b1;
    b0.buffer = 0;
    b1.buffer = 1;
    b1.memory[0] = std::byte{1};
    const Owner first{1000, 1}, restarted{1001, 2}, other{1002, 1};
    CHECK(imports.get(0, first, b0).memory == reinterpret_cast<void*>(1));
    CHECK(imports.get(0, first, b0).memory == reinterpret_cast<void*>(1));  // cached
    CHECK(imports.get(0, first, b1).memory == reinterpret_cast<void*>(2));
    CHECK(imports.get(1, other, b0).memory == reinterpret_cast<void*>(3));
    CHECK(imports.imported() == 3);
    CHECK(log == std::vector<std::string>{"open 0", "open 1", "open 0"});
    // target 0 restarted: its old handles go first
    log.clear();
    CHECK(imports.get(0, restarted, b0).memory == reinterpret_cast<void*>(4));
    CHECK(log == std::vector<std::string>{"close 1", "close 2", "open 0"});
    // other died
    log.clear();
    CHECK(imports.sweep([&](Owner o) { return !(o == other); }) == 1);
    CHECK(log == std::vector<std::string>{"close 3"});
    CHECK(imports.holders() == 1);
    // a failed import leaves nothing behind and says why
    PeerImports failing({[](const PeerRef&) -> Imported { fail("cudaIpcOpenMemHandle: gone"); },
                         [&](const Imported&) { log.push_back("never"); }});
    CHECK_THROWS_WITH_AS(failing.get(0, first, b0), doctest::Contains("gone"), Error);
    CHECK(failing.imported() == 0);
}

TEST_CASE("imports of a SIGKILLed target are closed by the sweep that asks the ring, those of live targets kept") {
    TempRing t;
    Holder a = spawn_holder(t.name, 31, {Copies::Peer});
    Holder b = spawn_holder(t.name, 32, {Copies::Peer});
    std::vector<void*> closed;
    PeerImports imports({[&](const PeerRef& ref) { return Imported{reinterpret_cast<void*>(ref.buffer + 1), nullptr}; },
                         [&](const Imported& imp) { closed.push_back(imp.memory); }});
    PeerRef ref;
    imports.get(0, a.owner, ref);
    ref.buffer = 5;
    imports.get(1, b.owner, ref);
    auto alive = [&](Owner o) { return t.ring.owner_alive(o); };
    CHECK(imports.sweep(alive) == 0);
    kill_and_reap(a.pid);
    CHECK(imports.sweep(alive) == 1);
    CHECK(closed == std::vector<void*>{reinterpret_cast<void*>(1)});
    CHECK(imports.holders() == 1);
    kill_and_reap(b.pid);
}

TEST_CASE("a slot's peer reference travels in its transport words; a host slot has none") {
    TempRing t;
    Ring w = joined(t.name, Role::Writer, 1);
    auto s = w.claim(0ms);
    REQUIRE(s);
    CHECK(!read_peer_ref(s->meta()));  // claim cleared the metadata
    PeerRef ref;
    ref.buffer = 3;
    ref.buffer_bytes = 12345;
    std::strcpy(ref.device, "0000:18:00.0");
    ref.memory[63] = std::byte{7};
    write_peer_ref(s->meta(), ref);
    auto back = read_peer_ref(s->meta());
    REQUIRE(back);
    CHECK(back->buffer == 3);
    CHECK(back->buffer_bytes == 12345);
    CHECK(std::string(back->device) == "0000:18:00.0");
    CHECK(back->memory[63] == std::byte{7});
}

TEST_CASE("a peer drafter sees its own GPU as device 0 and its targets' after it") {
    const std::vector<Place> targets{Place{0}, Place{1}, Place{3}};
    CHECK(widen_visible_devices("3", targets) == "3,0,1");
    CHECK(peer_ordinals("3,0,1", targets) == std::vector<int>{1, 2});
    CHECK(widen_visible_devices("2", {Place{0}, Place{0}}) == "2,0");
    CHECK(peer_ordinals("2,0", {Place{0}, Place{0}}) == std::vector<int>{1});
    CHECK(widen_visible_devices("", targets) == "");  // every GPU visible already
    CHECK(peer_ordinals("", targets) == std::vector<int>{1, 3});
    CHECK(peer_ordinals("1", {Place{1}}).empty());  // a target sharing the drafter's GPU: no peer
}
