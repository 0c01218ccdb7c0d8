// The ring's CUDA path: registration in chunks, a device -> slot -> device round trip through
// registered shared memory, and a failed registration that is reported and cleaned up.
#include "gpu_test.hpp"
#include "hsring/cuda_util.hpp"
#include "hsring/error.hpp"
#include "hsring/ring.hpp"
#include "transport/ring_cuda.hpp"
#include "hsring/units.hpp"

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <vector>

using namespace hsring;
using namespace std::chrono_literals;

namespace {
RingGeometry geometry() {
    RingGeometry g;
    g.slot_count = 4;
    g.slot_bytes = 8 * MiB;
    g.slot_tokens = 16;
    g.max_samples = 4;
    g.n_layers = 1;
    g.hidden = static_cast<std::uint32_t>(g.slot_bytes / 16 / 2);
    g.dtype_bytes = 2;
    return g;
}
} // namespace

TEST_CASE("device -> registered slot -> device keeps every byte, with chunked registration") {
    const std::string name = "hsring-test-cuda-" + std::to_string(::getpid());
    {
        Ring ring = Ring::create({name, geometry(), HugePages::Auto, true});
        ring.join(Role::Writer, 0, "test");
        // Chunks smaller than a slot: one slot per registration (a copy may not span two).
        CudaRegistration reg(ring, 4 * MiB);
        CHECK(reg.chunks() == geometry().slot_count);
        const std::size_t n = geometry().slot_bytes;
        std::vector<std::uint32_t> host(n / 4);
        for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::uint32_t>(i * 2654435761u);
        void *src = nullptr, *dst = nullptr;
        HSRING_CUDA(cudaMalloc(&src, n));
        HSRING_CUDA(cudaMalloc(&dst, n));
        HSRING_CUDA(cudaMemcpy(src, host.data(), n, cudaMemcpyHostToDevice));
        cudaStream_t s{};
        HSRING_CUDA(cudaStreamCreate(&s));
        auto w = ring.claim(0ms);
        REQUIRE(w);
        HSRING_CUDA(cudaMemcpyAsync(w->payload().data(), src, n, cudaMemcpyDeviceToHost, s));
        HSRING_CUDA(cudaStreamSynchronize(s));
        REQUIRE(w->commit());
        auto r = ring.acquire(0ms);
        REQUIRE(r);
        HSRING_CUDA(cudaMemcpyAsync(dst, r->payload().data(), n, cudaMemcpyHostToDevice, s));
        HSRING_CUDA(cudaStreamSynchronize(s));
        r->release();
        std::vector<std::uint32_t> back(n / 4, 0);
        HSRING_CUDA(cudaMemcpy(back.data(), dst, n, cudaMemcpyDeviceToHost));
        CHECK(back == host);
        // Registered memory is page-locked for the driver: the pointer is known to CUDA.
        cudaPointerAttributes attr{};
        HSRING_CUDA(cudaPointerGetAttributes(&attr, ring.payload(1)));
        CHECK(attr.type == cudaMemoryTypeHost);
        cudaFree(src);
        cudaFree(dst);
        cudaStreamDestroy(s);
    }
    Ring::remove(name);
}

TEST_CASE("registering the same ring twice in one process fails clearly and leaves CUDA usable") {
    const std::string name = "hsring-test-cuda2-" + std::to_string(::getpid());
    {
        Ring ring = Ring::create({name, geometry(), HugePages::Off, true});
        CudaRegistration first(ring);
        CHECK_THROWS_WITH_AS([&] { CudaRegistration again(ring); }(), doctest::Contains("cudaHostRegister of ring"), Error);
        void* p = nullptr;
        HSRING_CUDA(cudaMalloc(&p, 1024));  // the error was cleared
        cudaFree(p);
    }
    Ring::remove(name);
}

int main(int argc, char** argv) {
    hsring::test::require_gpu_or_skip();
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
