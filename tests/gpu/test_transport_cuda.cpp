// The transport on a GPU: device rows -> registered slot -> device buffer bit-exact, only the
// filled rows; a staged copy dropped before its copy completed still releases its slot. The peer
// kinds with a real target process (this program re-executed as --peer-writer; on GPU 1 when
// there are two, else on GPU 0 beside the reader): every batch arrives bit-exact through "peer"
// and "peer+host", and a SIGKILLed target's READY slots are re-issued ("peer") or read from their
// host copy ("peer+host").
#include "gpu_test.hpp"
#include "hsring/cuda_util.hpp"
#include "hsring/error.hpp"
#include "hsring/ring.hpp"
#include "hsring/transport.hpp"
#include "hsring/units.hpp"

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#ifdef HSRING_HAVE_CUDA
using namespace hsring;
using namespace std::chrono_literals;

namespace {
RingGeometry geometry() {
    RingGeometry g;
    g.slot_count = 4;
    g.slot_tokens = 1024;
    g.n_layers = 3;
    g.hidden = 2048;
    g.dtype_bytes = 2;
    g.slot_bytes = std::uint64_t{g.n_layers} * g.slot_tokens * g.hidden * g.dtype_bytes;  // 12 MiB
    g.max_samples = 4;
    return g;
}

struct TempRing {
    std::string name;
    Ring ring;
    TempRing() : name("hsring-test-tcuda-" + std::to_string(::getpid())), ring(Ring::create({name, geometry(), HugePages::Off, true})) {
        ring.join(Role::Writer, 1, "test");
    }
    ~TempRing() { Ring::remove(name); }
};

transport::GpuStream gpu(cudaStream_t s) { return s; }

const Ring* t_ring = nullptr;  // the ring of the peer test running now (the creator's view)
// The slot let go of `ticket`: FREE, or already claimed again under a later ticket.
bool t_state_free_or_reclaimed(std::uint32_t index, std::uint64_t ticket) {
    return t_ring->state(index) == SlotState::Free || t_ring->ticket(index) != ticket;
}
} // namespace

TEST_CASE("device rows -> host ring -> device buffer through the transport keep every byte, and only the filled rows move") {
    TempRing t;
    const RingGeometry g = geometry();
    const std::uint64_t row = std::uint64_t{g.hidden} * g.dtype_bytes, stride = g.slot_tokens * row, n = 700;
    auto writer = transport::make_slot_writer(t.ring, {true});
    auto reader = transport::make_slot_reader(t.ring, {true});
    cudaStream_t compute{};
    HSRING_CUDA(cudaStreamCreate(&compute));
    std::vector<std::uint32_t> host(n * row / 4);
    std::vector<void*> layers(g.n_layers);
    auto w = t.ring.claim(0ms);
    REQUIRE(w);
    w->meta().set_counts(1, n);
    writer->begin(*w, n);
    for (std::uint32_t l = 0; l < g.n_layers; ++l) {
        for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::uint32_t>((l + 1) * 2654435761u * (i + 7));
        HSRING_CUDA(cudaMalloc(&layers[l], n * row));
        // Queued on the compute stream: the transport's copy must wait for it.
        HSRING_CUDA(cudaMemcpyAsync(layers[l], host.data(), n * row, cudaMemcpyHostToDevice, compute));
        HSRING_CUDA(cudaStreamSynchronize(compute));  // host[] is reused for the next layer
        writer->put_layer(l, layers[l], gpu(compute), nullptr);
    }
    writer->finish();
    REQUIRE(w->commit());

    void* buffer = nullptr;
    HSRING_CUDA(cudaMalloc(&buffer, g.slot_bytes));
    HSRING_CUDA(cudaMemset(buffer, 0xEE, g.slot_bytes));
    auto r = t.ring.acquire(0ms);
    REQUIRE(r);
    const std::uint32_t index = r->index();
    auto copy = reader->stage(std::move(*r), buffer);
    copy->wait(gpu(compute));
    CHECK(t.ring.state(index) == SlotState::Free);
    CHECK(copy->copy_ms() > 0);
    std::vector<std::uint8_t> back(g.slot_bytes);
    HSRING_CUDA(cudaMemcpy(back.data(), buffer, g.slot_bytes, cudaMemcpyDeviceToHost));
    for (std::uint32_t l = 0; l < g.n_layers; ++l) {
        std::vector<std::uint8_t> want(n * row);
        HSRING_CUDA(cudaMemcpy(want.data(), layers[l], n * row, cudaMemcpyDeviceToHost));
        INFO("layer " << l);
        CHECK(std::equal(want.begin(), want.end(), back.begin() + static_cast<std::ptrdiff_t>(l * stride)));
        CHECK(back[l * stride + n * row] == 0xEE);  // the rows the batch does not fill were not copied
        cudaFree(layers[l]);
    }
    cudaFree(buffer);
    cudaStreamDestroy(compute);
}

// Issue 20's root cause: torch computes on the legacy default stream, whose handle is null. The
// writers took a null producer for "ready now" and copied at once on their non-blocking stream, so
// the ring got whatever the layer's memory held before the forward wrote it (the previous batch's
// rows; after a restart, a dead process's bytes, NaN among them). Here the rows are written on the
// legacy stream behind ~100 ms of other work: the copy must wait for them.
TEST_CASE("rows produced on the legacy default stream (null, torch's default) reach the slot only after they are written") {
    for (const auto kind : {TransportKind::Host, TransportKind::PeerAndHost}) {
        INFO("transport " << std::string(to_string(kind)));
        TempRing t;
        const RingGeometry g = geometry();
        const std::uint64_t row = std::uint64_t{g.hidden} * g.dtype_bytes, n = 1000, bytes = n * row;
        transport::TransportOptions opts{true};
        opts.kind = kind;
        auto writer = transport::make_slot_writer(t.ring, opts);
        void *layer = nullptr, *ready = nullptr, *busy = nullptr;
        const std::size_t busy_bytes = std::size_t{1} << 30;
        HSRING_CUDA(cudaMalloc(&layer, bytes));
        HSRING_CUDA(cudaMalloc(&ready, bytes));
        HSRING_CUDA(cudaMalloc(&busy, busy_bytes));
        HSRING_CUDA(cudaMemset(layer, 0x11, bytes));  // what the memory held before "the forward"
        HSRING_CUDA(cudaMemset(ready, 0x5A, bytes));
        HSRING_CUDA(cudaDeviceSynchronize());
        auto w = t.ring.claim(0ms);
        REQUIRE(w);
        w->meta().set_counts(1, n);
        writer->begin(*w, n);
        // "The forward": long work on the legacy default stream, then the layer's rows.
        for (int i = 0; i < 300; ++i) HSRING_CUDA(cudaMemsetAsync(busy, i & 0xff, busy_bytes, nullptr));
        HSRING_CUDA(cudaMemcpyAsync(layer, ready, bytes, cudaMemcpyDeviceToDevice, nullptr));
        writer->put_layer(0, layer, nullptr, nullptr);
        writer->finish();
        const auto* p = reinterpret_cast<const std::uint8_t*>(w->payload().data());
        const auto wrong = std::count_if(p, p + bytes, [](std::uint8_t b) { return b != 0x5A; });
        CHECK(wrong == 0);
        w->abort();
        HSRING_CUDA(cudaDeviceSynchronize());
        cudaFree(layer);
        cudaFree(ready);
        cudaFree(busy);
    }
}

TEST_CASE("a staged copy dropped before its copy completed still releases its slot, and nothing dangles") {
    TempRing t;
    const RingGeometry g = geometry();
    auto reader = transport::make_slot_reader(t.ring, {true});
    for (int i = 0; i < 3; ++i) {
        auto w = t.ring.claim(0ms);
        REQUIRE(w);
        w->meta().set_counts(1, g.slot_tokens);
        REQUIRE(w->commit());
    }
    void* buffer = nullptr;
    HSRING_CUDA(cudaMalloc(&buffer, g.slot_bytes));
    for (int i = 0; i < 3; ++i) {
        auto r = t.ring.acquire(0ms);
        REQUIRE(r);
        reader->stage(std::move(*r), buffer);  // the StagedCopy dies at once
    }
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (t.ring.occupancy().free != g.slot_count && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(1ms);
    CHECK(t.ring.occupancy().free == g.slot_count);
    CHECK(t.ring.counters().releases == 3);
    reader.reset();
    cudaFree(buffer);
}

TEST_CASE("a peer writer waiting for a free buffer stops when the ring is stopping or its worker's stop flag is set") {
    // Its one buffer holds a READY batch no drafter takes: before, begin() waited for a year.
    const RingGeometry g = geometry();
    const std::uint64_t n = 300, row = std::uint64_t{g.hidden} * g.dtype_bytes;
    void* rows = nullptr;
    HSRING_CUDA(cudaMalloc(&rows, n * row));
    HSRING_CUDA(cudaMemset(rows, 0, n * row));
    for (const bool by_ring : {false, true}) {
        CAPTURE(by_ring);
        TempRing t;
        std::atomic<bool> stop{false};
        transport::TransportOptions o;
        o.cuda = true;
        o.kind = TransportKind::Peer;
        o.peer_buffers = 1;
        o.stop = [&] { return stop.load(); };
        auto writer = transport::make_slot_writer(t.ring, o);
        auto w = t.ring.claim(0ms);
        REQUIRE(w);
        w->meta().set_counts(1, n);
        writer->begin(*w, n);
        for (std::uint32_t l = 0; l < g.n_layers; ++l) writer->put_layer(l, rows, nullptr, nullptr);
        writer->finish();
        REQUIRE(w->commit());
        auto next = t.ring.claim(0ms);
        REQUIRE(next);
        std::thread stopper([&] {
            std::this_thread::sleep_for(300ms);
            if (by_ring) t.ring.set_stopping(true);
            else stop = true;
        });
        const auto t0 = std::chrono::steady_clock::now();
        CHECK_THROWS_AS(writer->begin(*next, n), transport::WriteStopped);
        CHECK(std::chrono::steady_clock::now() - t0 < 5s);
        stopper.join();
        next->abort();
        // The READY batch taken, so the writer's exit does not wait for a drafter.
        Ring reader = Ring::attach(t.name);
        reader.join(Role::Reader, 2, "reader");
        t.ring.set_stopping(false);
        auto r = reader.acquire(0ms);
        REQUIRE(r);
        r->release();
        writer.reset();
    }
    cudaFree(rows);
}

// --- the peer kinds, with a target process ---------------------------------------------------

namespace {

// Word i of layer l of batch b's rows: distinct for every (batch, layer, word).
std::uint32_t pattern(std::uint64_t batch, std::uint32_t layer, std::size_t i) {
    return static_cast<std::uint32_t>((batch * 1000003u + layer * 7919u + i + 1) * 2654435761u);
}
std::uint64_t tokens_of(std::uint64_t batch) { return 300 + 97 * batch; }  // < slot_tokens (1024)

TransportKind kind_of(const std::string& k) {
    return k == "peer" ? TransportKind::Peer : k == "peer+host" ? TransportKind::PeerAndHost : TransportKind::Host;
}
int writer_gpu() { return cuda::device_count() > 1 ? 1 : 0; }

} // namespace

// The target: argv = --peer-writer RING KIND BATCHES GPU hold|exit. Commits BATCHES batches
// through a writer of KIND (2 device buffers), printing each ticket; then "hold" prints "done" and
// waits to be killed, "exit" waits for the ring to stop and exits 0.
int peer_writer_main(char** argv) {
    try {
        const std::string ring_name = argv[2], kind = argv[3], mode = argv[6];
        const int batches = std::atoi(argv[4]);
        HSRING_CUDA(cudaSetDevice(std::atoi(argv[5])));
        Ring ring = Ring::attach(ring_name);
        ring.join(Role::Writer, 1, "peer-writer");
        transport::TransportOptions o;
        o.cuda = true;
        o.kind = kind_of(kind);
        o.peer_buffers = 2;
        const RingGeometry g = ring.geometry();
        const std::uint64_t row = std::uint64_t{g.hidden} * g.dtype_bytes;
        std::vector<void*> layers(g.n_layers);
        for (auto& p : layers) HSRING_CUDA(cudaMalloc(&p, g.slot_tokens * row));
        {
            auto writer = transport::make_slot_writer(ring, o);
            for (int b = 0; b < batches; ++b) {
                auto w = ring.claim(60s);
                if (!w) {
                    std::fprintf(stderr, "peer-writer: no free slot in 60 s\n");
                    return 1;
                }
                const std::uint64_t n = tokens_of(static_cast<std::uint64_t>(b));
                w->meta().set_counts(1, n);
                w->meta().user()[0] = static_cast<std::uint64_t>(b);
                writer->begin(*w, n);
                std::vector<std::uint32_t> host(n * row / 4);
                for (std::uint32_t l = 0; l < g.n_layers; ++l) {
                    for (std::size_t i = 0; i < host.size(); ++i) host[i] = pattern(static_cast<std::uint64_t>(b), l, i);
                    HSRING_CUDA(cudaMemcpy(layers[l], host.data(), n * row, cudaMemcpyHostToDevice));
                    // A cudaMemcpy from pageable memory may return before its DMA reached the device
                    // (CUDA's API sync rules), and put_layer(nullptr) means "ready now": wait for it.
                    // Without this the H200 run saw the tail of a layer still holding the batch before.
                    HSRING_CUDA(cudaDeviceSynchronize());
                    writer->put_layer(l, layers[l], nullptr, nullptr);
                }
                writer->finish();
                const std::uint64_t ticket = w->ticket();
                if (!w->commit()) return 1;
                std::printf("%llu\n", static_cast<unsigned long long>(ticket));
                std::fflush(stdout);
            }
            if (mode == "hold") {
                std::printf("done\n");
                std::fflush(stdout);
                for (;;) ::pause();
            }
            while (!ring.stopping()) std::this_thread::sleep_for(10ms);
        }
        for (void* p : layers) cudaFree(p);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "peer-writer: %s\n", e.what());
        return 1;
    }
}

namespace {

struct Target {
    pid_t pid = 0;
    FILE* out = nullptr;
    // Reads one line of its stdout ("" at EOF).
    std::string line() {
        char buf[128];
        if (!std::fgets(buf, sizeof buf, out)) return {};
        std::string s(buf);
        while (!s.empty() && s.back() == '\n') s.pop_back();
        return s;
    }
    int wait() {
        int st = 0;
        ::waitpid(pid, &st, 0);
        if (out) std::fclose(out);
        out = nullptr;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
};

// This program re-executed as the target (a fresh process: no CUDA context inherited).
Target spawn_target(const std::string& ring, const std::string& kind, int batches, const std::string& mode) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const std::string n = std::to_string(batches), gpu = std::to_string(writer_gpu());
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::dup2(fds[1], STDOUT_FILENO);
        ::close(fds[0]);
        ::close(fds[1]);
        const char* args[] = {"test_transport_cuda", "--peer-writer", ring.c_str(), kind.c_str(), n.c_str(),
                              gpu.c_str(), mode.c_str(), nullptr};
        ::execv("/proc/self/exe", const_cast<char**>(args));
        ::_exit(127);
    }
    ::close(fds[1]);
    return Target{pid, ::fdopen(fds[0], "r")};
}

transport::TransportOptions reader_options(const std::string& kind) {
    transport::TransportOptions o;
    o.cuda = true;
    o.kind = kind_of(kind);
    if (writer_gpu() != 0) o.peer_devices = {writer_gpu()};
    return o;
}

// Stages `slot` through `reader` into `buffer` (0xEE first) and checks every byte that arrived
// against the pattern of its batch, and that the rows it does not fill were not written.
void check_arrives(transport::SlotReader& reader, ReadSlot slot, void* buffer) {
    const RingGeometry g = geometry();
    const std::uint64_t row = std::uint64_t{g.hidden} * g.dtype_bytes, stride = g.slot_tokens * row;
    const std::uint64_t batch = slot.meta().user()[0], n = slot.meta().n_tokens();
    REQUIRE(n == tokens_of(batch));
    HSRING_CUDA(cudaMemset(buffer, 0xEE, g.slot_bytes));
    HSRING_CUDA(cudaDeviceSynchronize());
    REQUIRE(reader.receive(slot, buffer));
    const std::uint32_t index = slot.index();
    const std::uint64_t ticket = slot.ticket();
    auto copy = reader.stage(std::move(slot), buffer);
    copy->wait(nullptr);
    HSRING_CUDA(cudaDeviceSynchronize());
    std::vector<std::uint32_t> back(g.slot_bytes / 4);
    HSRING_CUDA(cudaMemcpy(back.data(), buffer, g.slot_bytes, cudaMemcpyDeviceToHost));
    for (std::uint32_t l = 0; l < g.n_layers; ++l) {
        const std::uint32_t* got = back.data() + l * stride / 4;
        std::size_t bad = n * row / 4;
        for (std::size_t i = 0; i < n * row / 4; ++i)
            if (got[i] != pattern(batch, l, i)) {
                bad = i;
                break;
            }
        INFO("batch " << batch << " layer " << l << " first wrong word " << bad);
        CHECK(bad == n * row / 4);
        CHECK(got[n * row / 4] == 0xEEEEEEEEu);  // the first row the batch does not fill
    }
    // Released (or, for an earlier ticket's buffer, at least no longer ours).
    CHECK((t_state_free_or_reclaimed(index, ticket)));
}

} // namespace

TEST_CASE("peer and peer+host: every batch from a target process arrives bit-exact, through more batches than buffers and slots") {
    for (const std::string kind : {"peer", "peer+host"}) {
        CAPTURE(kind);
        TempRing t;
        t_ring = &t.ring;
        Ring r = Ring::attach(t.name);
        r.join(Role::Reader, 2, "reader");
        auto reader = transport::make_slot_reader(r, reader_options(kind));
        void* buffer = nullptr;
        HSRING_CUDA(cudaMalloc(&buffer, geometry().slot_bytes));
        const int batches = 7;
        Target target = spawn_target(t.name, kind, batches, "exit");
        for (int i = 0; i < batches; ++i) {
            auto s = r.acquire(60s);
            REQUIRE(s);
            CHECK(s->copies() == (kind == "peer" ? Copies::Peer : Copies::HostAndPeer));
            CHECK(s->holder().pid == target.pid);
            check_arrives(*reader, std::move(*s), buffer);
        }
        t.ring.set_stopping(true);
        CHECK(target.wait() == 0);
        CHECK(t.ring.counters().releases == static_cast<std::uint64_t>(batches));
        CHECK(t.ring.counters().peer_lost == 0);
        reader.reset();
        cudaFree(buffer);
        t_ring = nullptr;
    }
}

TEST_CASE("a SIGKILLed target: its peer-only READY slots are re-issued, its peer+host ones arrive bit-exact from the host copy") {
    for (const std::string kind : {"peer", "peer+host"}) {
        CAPTURE(kind);
        TempRing t;
        t_ring = &t.ring;
        Ring r = Ring::attach(t.name);
        r.join(Role::Reader, 2, "reader");
        std::vector<std::uint64_t> reissued;
        r.set_reclaim_hook([&](std::uint64_t ticket) { reissued.push_back(ticket); });
        auto reader = transport::make_slot_reader(r, reader_options(kind));
        void* buffer = nullptr;
        HSRING_CUDA(cudaMalloc(&buffer, geometry().slot_bytes));
        Target target = spawn_target(t.name, kind, 2, "hold");
        std::vector<std::uint64_t> tickets;
        for (std::string l; (l = target.line()) != "done";) {
            REQUIRE(!l.empty());
            tickets.push_back(std::stoull(l));
        }
        REQUIRE(tickets.size() == 2);
        ::kill(target.pid, SIGKILL);
        CHECK(target.wait() == 128 + SIGKILL);
        if (kind == "peer") {
            CHECK(!r.acquire(0ms));  // never a dead target's peer copy
            std::sort(reissued.begin(), reissued.end());
            CHECK(reissued == tickets);
            CHECK(t.ring.counters().peer_lost == 2);
        } else {
            for (int i = 0; i < 2; ++i) {
                auto s = r.acquire(0ms);
                REQUIRE(s);
                CHECK(s->copies() == Copies::Host);
                check_arrives(*reader, std::move(*s), buffer);
            }
            CHECK(reissued.empty());
        }
        CHECK(t.ring.occupancy().free == geometry().slot_count);
        reader.reset();
        cudaFree(buffer);
        t_ring = nullptr;
    }
}
#endif

int main(int argc, char** argv) {
#ifdef HSRING_HAVE_CUDA
    if (argc == 7 && std::string(argv[1]) == "--peer-writer") return peer_writer_main(argv);
#endif
    hsring::test::require_gpu_or_skip();
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
