// src/kernels' launchers say whose a CUDA error is: one pending from earlier work is reported as
// earlier (and left pending, the kernel not launched), not cleared and passed off as the launch's
// own; a launch's own error is its own; after the earlier error is read, the same launch works.
#include "gpu_test.hpp"
#include "hsring/cuda_util.hpp"
#include "kernels/rope.hpp"

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#ifdef HSRING_HAVE_CUDA
#include <cuda_runtime_api.h>

namespace {

// One row, one head of 8 fp32 dims; cos = 1, sin = 0: the rotation copies x.
struct Rope {
    float *x = nullptr, *out = nullptr, *cos = nullptr, *sin = nullptr;
    Rope() {
        for (float** p : {&x, &out, &cos, &sin}) {
            void* d = nullptr;
            HSRING_CUDA(cudaMalloc(&d, 8 * sizeof(float)));
            *p = static_cast<float*>(d);
        }
        const std::vector<float> xs{1, 2, 3, 4, 5, 6, 7, 8}, ones(8, 1.f), zeros(8, 0.f);
        HSRING_CUDA(cudaMemcpy(x, xs.data(), 32, cudaMemcpyHostToDevice));
        HSRING_CUDA(cudaMemcpy(cos, ones.data(), 32, cudaMemcpyHostToDevice));
        HSRING_CUDA(cudaMemcpy(sin, zeros.data(), 32, cudaMemcpyHostToDevice));
        HSRING_CUDA(cudaMemset(out, 0, 32));
    }
    ~Rope() {
        cudaFree(x);
        cudaFree(out);
        cudaFree(cos);
        cudaFree(sin);
    }
    hsring::kernels::RopeArgs args(std::int64_t head_dim = 8) const {
        hsring::kernels::RopeArgs a;
        a.x = x;
        a.out = out;
        a.cos = cos;
        a.sin = sin;
        a.rows = 1;
        a.heads = 1;
        a.head_dim = head_dim;
        a.x_row_stride = 8;
        a.x_head_stride = 8;
        a.table_row_stride = 8;
        a.dtype = hsring::kernels::Dtype::Float32;
        return a;
    }
    std::vector<float> result() const {
        std::vector<float> r(8);
        HSRING_CUDA(cudaMemcpy(r.data(), out, 32, cudaMemcpyDeviceToHost));
        return r;
    }
};

} // namespace

TEST_CASE("an error pending from earlier work is reported as earlier, left pending, and the kernel not launched") {
    Rope r;
    void* p = nullptr;
    REQUIRE(cudaMalloc(&p, std::size_t(1) << 62) == cudaErrorMemoryAllocation);  // pending, not read
    const hsring::kernels::LaunchStatus st = hsring::kernels::rope(r.args());
    CHECK(st.earlier);
    CHECK(st.error == static_cast<int>(cudaErrorMemoryAllocation));
    CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);  // still there for whoever reads it
    HSRING_CUDA(cudaDeviceSynchronize());
    CHECK(r.result() == std::vector<float>(8, 0.f));  // not launched

    // Read: the same launch is queued and computes.
    const hsring::kernels::LaunchStatus again = hsring::kernels::rope(r.args());
    CHECK(again.ok());
    CHECK_FALSE(again.earlier);
    HSRING_CUDA(cudaDeviceSynchronize());
    CHECK(r.result() == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
}

TEST_CASE("a launch's own error is its own") {
    Rope r;
    const hsring::kernels::LaunchStatus st = hsring::kernels::rope(r.args(7));  // odd head_dim
    CHECK(st.error == static_cast<int>(cudaErrorInvalidValue));
    CHECK_FALSE(st.earlier);
    CHECK(cudaGetLastError() == cudaSuccess);
}
#endif

int main(int argc, char** argv) {
    hsring::test::require_gpu_or_skip();
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
