// The CUDA path works at all: allocate on the device, copy a pattern there and back through
// pinned memory, check every byte; and the pinned bandwidth probe returns sane numbers.
#include "gpu_test.hpp"
#include "hsring/cuda_util.hpp"
#include "hsring/error.hpp"

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#ifdef HSRING_HAVE_CUDA
TEST_CASE("a pattern survives host -> device -> host through pinned memory") {
    constexpr std::size_t n = 64 << 20;
    std::uint8_t* host = nullptr;
    void* dev = nullptr;
    HSRING_CUDA(cudaMallocHost(reinterpret_cast<void**>(&host), n));
    HSRING_CUDA(cudaMalloc(&dev, n));
    for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<std::uint8_t>(i * 2654435761u >> 13);
    HSRING_CUDA(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice));
    std::vector<std::uint8_t> back(n, 0xee);
    HSRING_CUDA(cudaMemcpy(back.data(), dev, n, cudaMemcpyDeviceToHost));
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += back[i] != host[i];
    CHECK(bad == 0);
    cudaFree(dev);
    cudaFreeHost(host);
}

TEST_CASE("pinned bandwidth probe reports a plausible PCIe rate") {
    auto bw = hsring::cuda::measure_pinned_bandwidth(256 << 20, 5);
    MESSAGE("pinned H2D " << bw.h2d_gbs << " GB/s, D2H " << bw.d2h_gbs << " GB/s");
    CHECK(bw.h2d_gbs > 1.0);
    CHECK(bw.d2h_gbs > 1.0);
}

TEST_CASE("a CUDA error becomes an hsring::Error naming the call") {
    void* p = nullptr;
    CHECK_THROWS_WITH_AS(HSRING_CUDA(cudaMalloc(&p, std::size_t(1) << 62)),
                         doctest::Contains("cudaMalloc"), hsring::Error);
    int dev = -1;
    HSRING_CUDA(cudaGetDevice(&dev));  // the error was cleared: the runtime still works
    CHECK(dev >= 0);
}
#endif

int main(int argc, char** argv) {
    hsring::test::require_gpu_or_skip();
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
