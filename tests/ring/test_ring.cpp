// The ring in one process: layout, every legal transition, refused ones, reclaim, waits,
// attach checks, huge-page fallback. Multi-process behaviour is in test_ring_mp.cpp.
#include "hsring/error.hpp"
#include "hsring/ring.hpp"
#include "hsring/units.hpp"
#include "ring/layout.hpp"
#include "shm/region.hpp"
#include "ring_test_util.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

using namespace hsring;
using namespace std::chrono_literals;
using test::small_geometry;
using test::unique_ring_name;

namespace {

// Creates a ring and removes its name at scope exit.
struct TempRing {
    std::string name;
    Ring ring;
    explicit TempRing(RingGeometry g = small_geometry(), HugePages hp = HugePages::Off)
        : name(unique_ring_name("u")), ring(Ring::create({name, g, hp, true})) {}
    ~TempRing() { Ring::remove(name); }
};

struct EnvVar {
    std::string key;
    EnvVar(const char* k, const char* v) : key(k) { ::setenv(k, v, 1); }
    ~EnvVar() { ::unsetenv(key.c_str()); }
};

std::string error_of(auto&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    FAIL("expected an hsring::Error");
    return {};
}

} // namespace

TEST_CASE("the layout aligns payloads to 2 MiB and gives each control word its own lines") {
    RingGeometry g = small_geometry(5, 3 * MiB);
    auto off = ring_detail::Offsets::of(g);
    CHECK(off.payloads % (2 * MiB) == 0);
    CHECK(off.slot_stride == 4 * MiB);
    CHECK(off.controls % 64 == 0);
    CHECK(sizeof(ring_detail::SlotControl) == 128);
    CHECK(off.total == off.payloads + 5 * 4 * MiB);
    TempRing t(g);
    for (std::uint32_t s = 0; s < 5; ++s)
        CHECK(reinterpret_cast<std::uintptr_t>(t.ring.payload(s)) % (2 * MiB) == 0);
}

TEST_CASE("the layout hash covers every geometry field") {
    RingGeometry g = small_geometry();
    auto h = g.layout_hash();
    for (int f = 0; f < 7; ++f) {
        RingGeometry x = g;
        switch (f) {
        case 0: x.slot_count++; break;
        case 1: x.slot_bytes++; break;
        case 2: x.slot_tokens++; break;
        case 3: x.max_samples++; break;
        case 4: x.n_layers++; break;
        case 5: x.hidden++; break;
        case 6: x.dtype_bytes++; break;
        }
        CHECK(x.layout_hash() != h);
    }
}

TEST_CASE("a slot goes FREE -> WRITING -> READY -> READING -> FREE") {
    TempRing t;
    Ring& r = t.ring;
    r.join(Role::Writer, 3, "test");
    auto w = r.claim(0ms);
    REQUIRE(w);
    const std::uint32_t s = w->index();
    CHECK(r.state(s) == SlotState::Writing);
    CHECK(r.owner_of(s) == Owner{::getpid(), 3});
    CHECK(w->ticket() == 1);
    w->meta().set_counts(2, 10);
    w->meta().sample_ids()[0] = 42;
    std::uint64_t sum = test::fill_pattern(w->payload(), 7);
    w->meta().set_checksum(sum);
    CHECK(w->commit());
    CHECK(r.state(s) == SlotState::Ready);
    CHECK(!r.owner_of(s));

    auto rd = r.acquire(0ms);
    REQUIRE(rd);
    CHECK(rd->index() == s);
    CHECK(r.state(s) == SlotState::Reading);
    CHECK(rd->deliveries() == 1);
    CHECK(rd->meta().ticket() == 1);
    CHECK(rd->meta().n_samples() == 2);
    CHECK(rd->meta().sample_ids()[0] == 42);
    CHECK(test::checksum(rd->payload()) == sum);
    CHECK(rd->release());
    CHECK(r.state(s) == SlotState::Free);
    auto c = r.counters();
    CHECK(c.commits == 1);
    CHECK(c.releases == 1);
}

TEST_CASE("abort frees a slot; an abandoned WriteSlot aborts; an abandoned ReadSlot goes back") {
    TempRing t;
    Ring& r = t.ring;
    r.join(Role::Writer, 0, "test");
    {
        auto w = r.claim(0ms);
        REQUIRE(w);
        CHECK(w->abort());
        CHECK(r.occupancy().free == 4);
    }
    {
        auto w = r.claim(0ms);
        REQUIRE(w);  // dropped without commit: RAII abort
    }
    CHECK(r.occupancy().free == 4);
    CHECK(r.counters().aborts == 2);
    {
        auto w = r.claim(0ms);
        REQUIRE(w->commit());
    }
    {
        auto rd = r.acquire(0ms);
        REQUIRE(rd);  // dropped without release: back to READY, nothing lost
    }
    CHECK(r.occupancy().ready == 1);
    auto rd = r.acquire(0ms);
    REQUIRE(rd);
    CHECK(rd->deliveries() == 2);
    CHECK(r.counters().redeliveries == 1);
    CHECK(rd->release());
}

TEST_CASE("readers take the oldest READY slot first") {
    TempRing t(small_geometry(6));
    Ring& r = t.ring;
    r.join(Role::Writer, 0, "test");
    std::vector<WriteSlot> ws;
    for (int i = 0; i < 6; ++i) ws.push_back(*r.claim(0ms));
    // Commit in a scrambled order: delivery must still follow claim order (tickets).
    for (int i : {4, 1, 5, 0, 3, 2}) REQUIRE(ws[static_cast<std::size_t>(i)].commit());
    std::uint64_t last = 0;
    for (int i = 0; i < 6; ++i) {
        auto rd = r.acquire(0ms);
        REQUIRE(rd);
        CHECK(rd->ticket() > last);
        last = rd->ticket();
        // A put-back slot keeps its ticket: it is delivered first again.
        if (i == 2) {
            std::uint64_t tk = rd->ticket();
            REQUIRE(rd->put_back());
            auto again = r.acquire(0ms);
            REQUIRE(again);
            CHECK(again->ticket() == tk);
            CHECK(again->release());
        } else {
            CHECK(rd->release());
        }
    }
}

TEST_CASE("a reader with a filter takes only the slots it wants, oldest of them first, and leaves the rest READY") {
    TempRing t(small_geometry(4));
    Ring& r = t.ring;
    r.join(Role::Writer, 0, "test");
    // Each slot's metadata names what it holds (here: a word the reader orders by).
    for (std::uint64_t key : {7u, 3u, 9u, 3u}) {
        auto w = r.claim(0ms);
        REQUIRE(w);
        w->meta().user()[1] = key;
        REQUIRE(w->commit());
    }
    auto want = [](std::uint64_t key) { return [key](const SlotMeta& m) { return SlotMeta(m).user()[1] == key; }; };
    CHECK_FALSE(r.acquire(0ms, want(5)));  // none holds 5: nothing is taken
    auto a = r.acquire(0ms, want(3));
    REQUIRE(a);
    auto b = r.acquire(0ms, want(3));
    REQUIRE(b);
    CHECK(a->ticket() < b->ticket());  // the oldest wanted one first
    CHECK(r.occupancy().ready == 2);
    auto c = r.acquire(0ms, want(9));
    REQUIRE(c);
    CHECK(a->release());
    CHECK(b->release());
    CHECK(c->release());
    auto d = r.acquire(0ms);  // no filter: the oldest READY, the one nobody wanted
    REQUIRE(d);
    CHECK(SlotMeta(d->meta()).user()[1] == 7);
}

TEST_CASE("illegal transitions are refused") {
    TempRing t;
    Ring& r = t.ring;
    r.join(Role::Writer, 0, "test");
    auto w = r.claim(0ms);
    REQUIRE(w);
    // The writer is presumed dead and reclaimed: its later commit must not resurrect the slot.
    r.reclaim(r.self());
    CHECK(r.state(w->index()) == SlotState::Free);
    CHECK_FALSE(w->commit());
    CHECK(r.state(w->index()) == SlotState::Free);
    r.join(Role::Writer, 0, "test");  // reclaim also removed our owner entry

    auto w2 = r.claim(0ms);
    REQUIRE(w2->commit());
    auto rd = r.acquire(0ms);
    REQUIRE(rd);
    r.reclaim(r.self());
    CHECK(r.state(rd->index()) == SlotState::Ready);
    CHECK_FALSE(rd->release());  // no longer ours: refused, stays READY
    CHECK(r.state(rd->index()) == SlotState::Ready);
    r.join(Role::Reader, 0, "test");
    // Reclaim leaves READY and FREE slots alone.
    auto res = r.reclaim(r.self());
    CHECK(res.empty());
    CHECK(r.occupancy().ready == 1);
}

TEST_CASE("reclaim frees a dead writer's slot after re-issuing its ticket, and returns a dead reader's") {
    TempRing t;
    Ring& r = t.ring;
    // Make a child claim one slot and acquire another, then die holding both.
    r.join(Role::Writer, 0, "parent");
    REQUIRE(r.claim(0ms)->commit());
    pid_t child = ::fork();
    if (child == 0) {
        Ring c = Ring::attach(t.name);
        c.join(Role::Writer, 9, "child");
        auto rd = c.acquire(0ms);
        auto w = c.claim(0ms);
        if (!rd || !w) ::_exit(3);
        ::kill(::getpid(), SIGKILL);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));
    Occupancy o = r.occupancy();
    CHECK(o.writing == 1);
    CHECK(o.reading == 1);
    std::vector<std::uint64_t> reissued;
    auto res = r.reclaim_dead([&](std::uint64_t ticket) { reissued.push_back(ticket); });
    CHECK(res.writing_freed.size() == 1);
    CHECK(res.reading_returned.size() == 1);
    REQUIRE(reissued.size() == 1);
    CHECK(reissued[0] == 2);  // the child's claim was the second ticket
    o = r.occupancy();
    CHECK(o.writing == 0);
    CHECK(o.reading == 0);
    CHECK(o.ready == 1);
    auto rd = r.acquire(0ms);
    REQUIRE(rd);
    CHECK(rd->deliveries() == 2);  // redelivered, and counted
    CHECK(r.reclaim_dead().empty());  // idempotent
}

TEST_CASE("the owner table lists who joined, with liveness") {
    TempRing t;
    CHECK(t.ring.owners().empty());
    t.ring.join(Role::Writer, 5, "target.0");
    auto o = t.ring.owners();
    REQUIRE(o.size() == 1);
    CHECK(o[0].owner == Owner{::getpid(), 5});
    CHECK(o[0].role == Role::Writer);
    CHECK(o[0].name == "target.0");
    CHECK(o[0].alive);
    t.ring.leave();
    CHECK(t.ring.owners().empty());
}

TEST_CASE("liveness: self alive, reaped child dead, zombie dead, reused pid detected by start time") {
    CHECK(process_alive(::getpid(), process_start_ticks(::getpid())));
    CHECK_FALSE(process_alive(::getpid(), process_start_ticks(::getpid()) + 1));
    pid_t child = ::fork();
    if (child == 0) ::_exit(0);
    std::this_thread::sleep_for(50ms);  // it exits; not reaped yet: a zombie
    CHECK_FALSE(process_alive(child));
    ::waitpid(child, nullptr, 0);
    CHECK_FALSE(process_alive(child));
}

TEST_CASE("waits time out without spinning, and a release wakes a waiting writer promptly") {
    TempRing t(small_geometry(2));
    Ring& r = t.ring;
    r.join(Role::Writer, 0, "test");
    REQUIRE(r.claim(0ms)->commit());
    REQUIRE(r.claim(0ms)->commit());
    auto t0 = std::chrono::steady_clock::now();
    CHECK_FALSE(r.claim(150ms));  // full
    auto waited = std::chrono::steady_clock::now() - t0;
    CHECK(waited >= 150ms);
    CHECK(waited < 2s);
    std::clock_t cpu0 = std::clock();
    std::thread reader([&] {
        std::this_thread::sleep_for(200ms);
        auto rd = r.acquire(0ms);
        rd->release();
    });
    t0 = std::chrono::steady_clock::now();
    auto w = r.claim(5000ms);
    auto woke = std::chrono::steady_clock::now() - t0;
    reader.join();
    CHECK(w);
    CHECK(woke < 1s);
    // A sleeping waiter burns (almost) no CPU: far less than the 200 ms it waited.
    CHECK(double(std::clock() - cpu0) / CLOCKS_PER_SEC < 0.1);
}

TEST_CASE("stopping: writers stop claiming, readers drain what is READY then stop") {
    TempRing t;
    Ring& r = t.ring;
    r.join(Role::Writer, 0, "test");
    REQUIRE(r.claim(0ms)->commit());
    r.set_stopping(true);
    CHECK(r.stopping());
    CHECK_FALSE(r.claim(1000ms));
    auto rd = r.acquire(1000ms);
    REQUIRE(rd);
    rd->release();
    auto t0 = std::chrono::steady_clock::now();
    CHECK_FALSE(r.acquire(5000ms));
    CHECK(std::chrono::steady_clock::now() - t0 < 1s);
}

TEST_CASE("attach checks identity and layout") {
    TempRing t;
    Ring a = Ring::attach(t.name, nullptr);
    CHECK(a.geometry().layout_hash() == small_geometry().layout_hash());
    RingGeometry same = small_geometry();
    Ring b = Ring::attach(t.name, &same);
    CHECK(b.creator_pid() == ::getpid());

    RingGeometry other = small_geometry(8);
    std::string e = error_of([&] { Ring::attach(t.name, &other); });
    CHECK(e.find("has another layout") != std::string::npos);
    CHECK(e.find("4 slots") != std::string::npos);
    CHECK(e.find("8 slots") != std::string::npos);
    CHECK(e.find("hsring ring rm") != std::string::npos);

    e = error_of([&] { Ring::create({t.name, small_geometry(), HugePages::Off, true}); });
    CHECK(e.find("already exists") != std::string::npos);

    e = error_of([] { Ring::attach("hsring-test-no-such-ring"); });
    CHECK(e.find("no ring named 'hsring-test-no-such-ring'") != std::string::npos);
}

TEST_CASE("a non-hsring object or another version is refused") {
    std::string name = unique_ring_name("junk");
    std::string path = shm::shm_dir() + "/" + name;
    {
        std::ofstream f(path);
        f << std::string(4 * MiB, 'x');
    }
    ::chmod(path.c_str(), 0600);
    std::string e = error_of([&] { Ring::attach(name); });
    CHECK(e.find("is not an hsring ring") != std::string::npos);
    ::unlink(path.c_str());

    TempRing t;
    {
        int fd = ::open(shm::Region::find(t.name).c_str(), O_RDWR);
        std::uint32_t v = 99;
        REQUIRE(::pwrite(fd, &v, 4, offsetof(ring_detail::RingHeader, version)) == 4);
        ::close(fd);
    }
    e = error_of([&] { Ring::attach(t.name); });
    CHECK(e.find("layout version 99") != std::string::npos);
}

TEST_CASE("huge pages: auto falls back to /dev/shm, require fails clearly, nothing is left behind") {
    EnvVar none("HSRING_HUGETLBFS", "none");
    std::string name = unique_ring_name("hp");
    {
        Ring r = Ring::create({name, small_geometry(), HugePages::Auto, true});
        CHECK_FALSE(r.region().huge_pages);
        CHECK(r.region().path.rfind(shm::shm_dir(), 0) == 0);
        Ring::remove(name);
    }
    std::string e = error_of([&] { Ring::create({name, small_geometry(), HugePages::Require, true}); });
    CHECK(e.find("huge_pages = \"require\"") != std::string::npos);
    CHECK(e.find("hugetlbfs") != std::string::npos);
    CHECK_FALSE(Ring::exists(name));
    for (const auto& entry : std::filesystem::directory_iterator(shm::shm_dir()))
        CHECK(entry.path().filename().string().find(name) == std::string::npos);
}

TEST_CASE("a ring larger than memory is a clear start-up error, and leaves nothing behind") {
    std::string name = unique_ring_name("big");
    RingGeometry g = small_geometry(64, 1024 * GiB);  // 64 TiB
    std::string e = error_of([&] { Ring::create({name, g, HugePages::Off, true}); });
    CHECK((e.find("cannot reserve") != std::string::npos || e.find("cannot size") != std::string::npos));
    CHECK_FALSE(Ring::exists(name));
    for (const auto& entry : std::filesystem::directory_iterator(shm::shm_dir()))
        CHECK(entry.path().filename().string().find(name) == std::string::npos);
}

// --- whose ring it is (invariant 8, docs/architecture.md; issue 12) --------------------------------------

TEST_CASE("a ring of another run is refused with whose it is and what to do") {
    const std::string name = unique_ring_name("tag");
    RingOptions o{name, small_geometry(), HugePages::Off, true};
    o.tag = RunTag::of("/tmp/run-a", small_geometry().layout_hash(), 0xd1, 0, 1);
    { Ring created = Ring::create(o); }
    RunTag same = o.tag;
    CHECK_NOTHROW(Ring::attach(name, nullptr, &same));
    RunTag other = RunTag::of("/tmp/run-b", small_geometry().layout_hash(), 0xd1, 0, 1);
    std::string e = error_of([&] { Ring::attach(name, nullptr, &other); });
    CHECK(e.find("belongs to another run: run dir /tmp/run-a (this run: /tmp/run-b)") != std::string::npos);
    CHECK(e.find("hsring ring rm " + name) != std::string::npos);
    CHECK(e.find("--fresh") != std::string::npos);
    other = same;
    other.data_fingerprint = 0xd2;
    e = error_of([&] { Ring::attach(name, nullptr, &other); });
    CHECK(e.find("another data set: fingerprint 00000000000000d1 (this run: 00000000000000d2)") != std::string::npos);
    other = same;
    other.node_rank = 1;
    other.nnodes = 2;
    e = error_of([&] { Ring::attach(name, nullptr, &other); });
    CHECK(e.find("machine 0 of 1 (this run: machine 1 of 2)") != std::string::npos);
    other = same;
    other.owner_uid += 1;
    e = error_of([&] { Ring::attach(name, nullptr, &other); });
    CHECK(e.find("user ") != std::string::npos);
    other = same;
    other.data_fingerprint = 0;  // a drafter does not read the data: not compared
    CHECK_NOTHROW(Ring::attach(name, nullptr, &other));
    Ring::remove(name);
}

TEST_CASE("shared memory that other users may access, or of another user, is refused") {
    TempRing t;
    const std::string path = shm::Region::find(t.name);
    struct stat st{};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);  // made private
    ::chmod(path.c_str(), 0666);
    std::string e = error_of([&] { Ring::attach(t.name); });
    CHECK(e.find("has mode 0666: other users may read or write it") != std::string::npos);
    ::chmod(path.c_str(), 0600);
    if (::geteuid() == 0) {
        REQUIRE(::chown(path.c_str(), 54321, 54321) == 0);
        e = error_of([&] { Ring::attach(t.name); });
        CHECK(e.find("(uid 54321), not to you") != std::string::npos);
        REQUIRE(::chown(path.c_str(), 0, 0) == 0);
    }
    const std::string link = shm::shm_dir() + "/" + unique_ring_name("link");
    REQUIRE(::symlink(path.c_str(), link.c_str()) == 0);
    e = error_of([&] { Ring::attach(link.substr(link.rfind('/') + 1)); });
    CHECK(e.find("is a symbolic link") != std::string::npos);
    ::unlink(link.c_str());
}

TEST_CASE("a creator killed mid-create leaves its temporary file only until the next create") {
    const std::string name = unique_ring_name("mid");
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        shm::Region::create(name, 4 * MiB, HugePages::Off, false, [](std::byte*) { ::_exit(0); });
        ::_exit(1);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    const std::string tmp = shm::shm_dir() + "/." + name + ".creating." + std::to_string(child);
    CHECK(::access(tmp.c_str(), F_OK) == 0);  // what the dead creator left
    CHECK_FALSE(Ring::exists(name));
    { Ring r = Ring::create({name, small_geometry(), HugePages::Off, true}); }
    CHECK(::access(tmp.c_str(), F_OK) != 0);
    Ring::remove(name);
}

TEST_CASE("an owner entry left half-joined by a killed process is freed by reclaim_dead") {
    TempRing t;
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        Ring c = Ring::attach(t.name);
        set_ring_test_hook([](const char* point) {
            if (std::string(point) == "join.reserved") ::kill(::getpid(), SIGKILL);
        });
        c.join(Role::Writer, 3, "child");
        ::_exit(1);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));
    auto owners = t.ring.owners();
    REQUIRE(owners.size() == 1);
    CHECK(owners[0].name == "(joining)");
    CHECK_FALSE(owners[0].alive);
    t.ring.reclaim_dead();
    CHECK(t.ring.owners().empty());  // recycled: 128 such deaths no longer fill the table
}

TEST_CASE("the ring's creator is a live user only with its start time: a reused pid is not") {
    TempRing t;
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::pause();
        ::_exit(0);
    }
    std::uint64_t ticks = 0;
    for (int i = 0; i < 100 && !ticks; ++i) {
        ticks = process_start_ticks(child);
        if (!ticks) std::this_thread::sleep_for(10ms);
    }
    REQUIRE(ticks);
    auto* h = reinterpret_cast<ring_detail::RingHeader*>(t.ring.payload(0) - ring_detail::Offsets::of(t.ring.geometry()).payloads);
    h->creator_pid = child;
    h->creator_start_ticks = ticks + 1;  // another process once had this pid
    CHECK(t.ring.live_users().empty());
    h->creator_start_ticks = ticks;
    REQUIRE(t.ring.live_users().size() == 1);
    CHECK(t.ring.live_users()[0].owner.pid == child);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
}
