// The writer/reader/probe processes of hsring-bench ring (see ring_bench.cpp).
#include "bench_args.hpp"
#include "hsring/cuda_util.hpp"
#include "hsring/error.hpp"
#include "hsring/log.hpp"
#include "hsring/ring.hpp"
#include "hsring/units.hpp"

#ifdef HSRING_HAVE_CUDA
#include "hsring/ring_cuda.hpp"

#include <cuda_runtime_api.h>
#endif

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <deque>
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
#endif

} // namespace

int run_worker(const Args& a) {
    log::set_name(fmt::format("{}.{}", a.role, a.index));
    Ring ring = Ring::attach(a.ring);
    ring.join(a.role == "writer" ? Role::Writer : Role::Reader, 0, a.role);
    if (!a.cuda) return cpu_worker(a, ring);
#ifdef HSRING_HAVE_CUDA
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

} // namespace hsring::bench
