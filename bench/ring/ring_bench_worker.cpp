// The writer/reader/probe processes of hsring-bench ring (see ring_bench.cpp).
#include "bench_args.hpp"
#include "hsring/cuda_util.hpp"
#include "hsring/error.hpp"
#include "hsring/log.hpp"
#include "hsring/ring.hpp"
#include "hsring/transport.hpp"
#include "hsring/units.hpp"

#ifdef HSRING_HAVE_CUDA
#include "transport/ring_cuda.hpp"

#include <cuda_runtime_api.h>
#endif

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <set>
#include <vector>

using namespace std::chrono_literals;

namespace hsring::bench {
namespace {

int cpu_worker(const Args& a, Ring& ring) {
    std::vector<std::byte> buf(ring.geometry().slot_bytes, std::byte(a.index + 1));
    if (a.role == "writer") {
        for (;;) {
            auto w = ring.claim(100ms);
            if (!w) {
                if (ring.stopping()) return 0;
                continue;
            }
            std::memcpy(w->payload().data(), buf.data(), buf.size());
            w->commit();
        }
    }
    for (;;) {
        auto r = ring.acquire(100ms);
        if (!r) {
            if (ring.stopping()) return 0;
            continue;
        }
        std::memcpy(buf.data(), r->payload().data(), buf.size());
        r->release();
    }
}

#ifdef HSRING_HAVE_CUDA
int gpu_of(const Args& a, int devices) {
    return a.role == "writer" ? a.index % devices : devices - 1 - (a.index % devices);
}

// Keeps `depth` copies in flight on one stream: the next copy is queued before the previous one
// completes, so the copy engine never idles between slots.
template <typename Slot, typename Start, typename Finish>
int pipelined(const Args& a, Ring& ring, Start start, Finish finish) {
    cudaStream_t stream{};
    HSRING_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::vector<cudaEvent_t> events(static_cast<std::size_t>(a.depth));
    for (auto& e : events) HSRING_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync));
    struct InFlight {
        Slot slot;
        cudaEvent_t done;
    };
    std::deque<InFlight> q;
    std::size_t next = 0;
    for (;;) {
        if (q.size() < events.size()) {
            std::optional<Slot> s = start(q.empty() ? 100ms : 0ms, stream, next % events.size());
            if (s) {
                cudaEvent_t e = events[next++ % events.size()];
                HSRING_CUDA(cudaEventRecord(e, stream));
                q.push_back({std::move(*s), e});
                continue;
            }
            if (q.empty()) {
                if (ring.stopping()) break;
                continue;
            }
        }
        HSRING_CUDA(cudaEventSynchronize(q.front().done));
        finish(q.front().slot);
        q.pop_front();
    }
    for (auto e : events) cudaEventDestroy(e);
    cudaStreamDestroy(stream);
    return 0;
}

int cuda_worker(const Args& a, Ring& ring) {
    const int devices = cuda::device_count();
    if (devices == 0) fail("--cuda: no CUDA device visible");
    HSRING_CUDA(cudaSetDevice(gpu_of(a, devices)));
    CudaRegistration reg(ring);
    const std::size_t bytes = ring.geometry().slot_bytes;
    std::vector<void*> dev(static_cast<std::size_t>(a.depth));
    for (auto& d : dev) {
        HSRING_CUDA(cudaMalloc(&d, bytes));
        HSRING_CUDA(cudaMemset(d, a.index + 1, bytes));
    }
    int rc;
    if (a.role == "writer") {
        rc = pipelined<WriteSlot>(
            a, ring,
            [&](std::chrono::milliseconds t, cudaStream_t s, std::size_t k) -> std::optional<WriteSlot> {
                auto w = ring.claim(t);
                if (w) HSRING_CUDA(cudaMemcpyAsync(w->payload().data(), dev[k], bytes, cudaMemcpyDeviceToHost, s));
                return w;
            },
            [](WriteSlot& w) { w.commit(); });
    } else {
        rc = pipelined<ReadSlot>(
            a, ring,
            [&](std::chrono::milliseconds t, cudaStream_t s, std::size_t k) -> std::optional<ReadSlot> {
                auto r = ring.acquire(t);
                if (r) HSRING_CUDA(cudaMemcpyAsync(dev[k], r->payload().data(), bytes, cudaMemcpyHostToDevice, s));
                return r;
            },
            [](ReadSlot& r) { r.release(); });
    }
    for (auto d : dev) cudaFree(d);
    return rc;
}

// --transport peer|peer+host: the worker's slots go through the transport (hsring/transport.hpp)
// as a real target's and drafter's do. A writer hands one device buffer per slot to its
// SlotWriter (a D2D copy into an exported buffer, plus the D2H copy for peer+host); a reader
// pulls each slot device to device into one of `depth` landing buffers.
int transport_worker(const Args& a, Ring& ring) {
    const int devices = cuda::device_count();
    if (devices == 0) fail("--cuda: no CUDA device visible");
    const int gpu = gpu_of(a, devices);
    HSRING_CUDA(cudaSetDevice(gpu));
    transport::TransportOptions o;
    o.cuda = true;
    o.kind = a.transport;
    o.peer_buffers = static_cast<std::uint32_t>(a.peer_buffers);
    const std::size_t bytes = ring.geometry().slot_bytes;
    if (a.role == "writer") {
        void* src = nullptr;
        HSRING_CUDA(cudaMalloc(&src, bytes));
        HSRING_CUDA(cudaMemset(src, a.index + 1, bytes));
        {
            auto writer = transport::make_slot_writer(ring, o);
            for (;;) {
                auto w = ring.claim(100ms);
                if (!w) {
                    if (ring.stopping()) break;
                    continue;
                }
                w->meta().set_counts(1, ring.geometry().slot_tokens);
                w->meta().set_writer_rank(static_cast<std::uint32_t>(a.index));  // readers import per writer
                writer->begin(*w, ring.geometry().slot_tokens);
                writer->put_layer(0, src, nullptr, nullptr);
                writer->finish();
                w->commit();
            }
        }  // the writer hands back what no reader took, then frees its buffers
        cudaFree(src);
        return 0;
    }
    for (int w = 0; w < a.writers; ++w) {
        const int g = w % devices;
        if (g != gpu && std::find(o.peer_devices.begin(), o.peer_devices.end(), g) == o.peer_devices.end())
            o.peer_devices.push_back(g);
    }
    std::vector<void*> dev(static_cast<std::size_t>(a.depth));
    for (auto& d : dev) HSRING_CUDA(cudaMalloc(&d, bytes));
    {
        auto reader = transport::make_slot_reader(ring, o);
        struct InFlight {
            std::unique_ptr<transport::StagedCopy> copy;
            std::size_t buffer;
        };
        std::deque<InFlight> q;
        std::vector<bool> busy(dev.size(), false);
        auto retire = [&] {
            q.front().copy->wait(nullptr);
            busy[q.front().buffer] = false;
            q.pop_front();
        };
        for (;;) {
            if (q.size() == dev.size()) retire();
            auto r = ring.acquire(q.empty() ? 100ms : 0ms);
            if (!r) {
                if (!q.empty()) {
                    retire();
                    continue;
                }
                if (ring.stopping()) break;
                continue;
            }
            const std::size_t b = static_cast<std::size_t>(std::find(busy.begin(), busy.end(), false) - busy.begin());
            if (!reader->receive(*r, dev[b])) continue;  // its writer died: nothing to copy
            busy[b] = true;
            q.push_back({reader->stage(std::move(*r), dev[b]), b});
        }
    }
    for (auto d : dev) cudaFree(d);
    return 0;
}

// The raw cudaIpc copy the peer transport is measured against: "ipc-source" allocates a slot's
// bytes on the first writer's GPU, prints its IPC handle (hex) and waits for stdin to close;
// "ipc-probe --handle HEX" opens it on the first reader's GPU and times plain device-to-device
// copies of it (median of 20), printing "limit X" in GB/s.
int run_ipc_source(const Args& a) {
    const int devices = cuda::device_count();
    if (devices == 0) fail("--cuda: no CUDA device visible");
    HSRING_CUDA(cudaSetDevice(0 % devices));
    void* p = nullptr;
    HSRING_CUDA(cudaMalloc(&p, std::size_t(a.slot_mib) * MiB));
    HSRING_CUDA(cudaMemset(p, 7, std::size_t(a.slot_mib) * MiB));
    HSRING_CUDA(cudaDeviceSynchronize());
    cudaIpcMemHandle_t h{};
    HSRING_CUDA(cudaIpcGetMemHandle(&h, p));
    const auto* b = reinterpret_cast<const unsigned char*>(&h);
    std::string hex;
    for (std::size_t i = 0; i < sizeof h; ++i) hex += fmt::format("{:02x}", b[i]);
    std::printf("%s\n", hex.c_str());
    std::fflush(stdout);
    for (std::string line; std::getline(std::cin, line);) {
    }
    cudaFree(p);
    return 0;
}

int run_ipc_probe(const Args& a) {
    const int devices = cuda::device_count();
    if (devices == 0) fail("--cuda: no CUDA device visible");
    cudaIpcMemHandle_t h{};
    if (a.handle.size() != 2 * sizeof h) fail("--handle: expected {} hex digits", 2 * sizeof h);
    auto* b = reinterpret_cast<unsigned char*>(&h);
    for (std::size_t i = 0; i < sizeof h; ++i) b[i] = static_cast<unsigned char>(std::stoul(a.handle.substr(2 * i, 2), nullptr, 16));
    const int dst_gpu = devices - 1;
    HSRING_CUDA(cudaSetDevice(dst_gpu));
    if (dst_gpu != 0) {
        int can = 0;
        HSRING_CUDA(cudaDeviceCanAccessPeer(&can, dst_gpu, 0));
        if (!can) fail("GPU {} has no peer access to GPU 0: no raw cudaIpc copy to measure", dst_gpu);
    }
    void* src = nullptr;
    HSRING_CUDA(cudaIpcOpenMemHandle(&src, h, cudaIpcMemLazyEnablePeerAccess));
    const std::size_t bytes = std::size_t(a.slot_mib) * MiB;
    void* dst = nullptr;
    HSRING_CUDA(cudaMalloc(&dst, bytes));
    cudaStream_t s{};
    HSRING_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0{}, e1{};
    HSRING_CUDA(cudaEventCreate(&e0));
    HSRING_CUDA(cudaEventCreate(&e1));
    std::vector<double> gbs;
    for (int i = 0; i < 23; ++i) {
        HSRING_CUDA(cudaEventRecord(e0, s));
        HSRING_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
        HSRING_CUDA(cudaEventRecord(e1, s));
        HSRING_CUDA(cudaEventSynchronize(e1));
        float ms = 0;
        HSRING_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 3) gbs.push_back(double(bytes) / (ms / 1e3) / 1e9);  // the first ones warm up
    }
    std::sort(gbs.begin(), gbs.end());
    fmt::print("raw cudaIpc copy GPU0 -> GPU{}: {:.1f} GB/s\n", dst_gpu, gbs[gbs.size() / 2]);
    fmt::print("limit {:.3f}\n", gbs[gbs.size() / 2]);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(s);
    cudaFree(dst);
    cudaIpcCloseMemHandle(src);
    return 0;
}
#endif

} // namespace

int run_worker(const Args& a) {
    log::set_name(fmt::format("{}.{}", a.role, a.index));
    Ring ring = Ring::attach(a.ring);
    ring.join(a.role == "writer" ? Role::Writer : Role::Reader, 0, a.role);
    if (!a.cuda) return cpu_worker(a, ring);
#ifdef HSRING_HAVE_CUDA
    if (a.transport != TransportKind::Host) return transport_worker(a, ring);
    return cuda_worker(a, ring);
#else
    fail("--cuda: this build has no CUDA runtime");
#endif
}

int run_probe(const Args& a) {
#ifdef HSRING_HAVE_CUDA
    const int devices = cuda::device_count();
    if (devices == 0) fail("--cuda: no CUDA device visible");
    std::set<int> wg, rg;
    for (int i = 0; i < a.writers; ++i) wg.insert(i % devices);
    for (int i = 0; i < a.readers; ++i) rg.insert(devices - 1 - (i % devices));
    const std::size_t bytes = std::min<std::size_t>(std::size_t(a.slot_mib) * MiB, 1024 * MiB);
    double d2h = 0, h2d = 0;
    for (int g : wg) {
        HSRING_CUDA(cudaSetDevice(g));
        auto bw = cuda::measure_pinned_bandwidth(bytes, 8);
        fmt::print("pinned D2H GPU{}: {:.1f} GB/s\n", g, bw.d2h_gbs);
        d2h += bw.d2h_gbs;
    }
    for (int g : rg) {
        HSRING_CUDA(cudaSetDevice(g));
        auto bw = cuda::measure_pinned_bandwidth(bytes, 8);
        fmt::print("pinned H2D GPU{}: {:.1f} GB/s\n", g, bw.h2d_gbs);
        h2d += bw.h2d_gbs;
    }
    fmt::print("limit {:.3f}\n", std::min(d2h, h2d));
    return 0;
#else
    (void)a;
    fail("--cuda: this build has no CUDA runtime");
#endif
}

int run_ipc(const Args& a) {
#ifdef HSRING_HAVE_CUDA
    return a.role == "ipc-source" ? run_ipc_source(a) : run_ipc_probe(a);
#else
    (void)a;
    fail("--transport: this build has no CUDA runtime");
#endif
}

} // namespace hsring::bench
