#include "hsring/cuda_util.hpp"

#include "hsring/error.hpp"

#include <algorithm>
#include <vector>

namespace hsring::cuda {

#ifdef HSRING_HAVE_CUDA
void check(cudaError_t err, const char* what) {
    if (err == cudaSuccess) return;
    cudaGetLastError();  // clear a non-sticky error so the process can go on after reporting
    fail("{}: {}: {}", what, cudaGetErrorName(err), cudaGetErrorString(err));
}

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

PinnedBandwidth measure_pinned_bandwidth(std::size_t bytes, int reps) {
    void* host = nullptr;
    void* dev = nullptr;
    cudaStream_t s{};
    cudaEvent_t a{}, b{};
    HSRING_CUDA(cudaMallocHost(&host, bytes));
    HSRING_CUDA(cudaMalloc(&dev, bytes));
    HSRING_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    HSRING_CUDA(cudaEventCreate(&a));
    HSRING_CUDA(cudaEventCreate(&b));
    std::fill_n(static_cast<unsigned char*>(host), bytes, 0x5a);  // real pages, not zero-fill
    auto run = [&](cudaMemcpyKind kind) {
        std::vector<float> ms;
        for (int i = 0; i < reps + 1; ++i) {
            HSRING_CUDA(cudaEventRecord(a, s));
            if (kind == cudaMemcpyHostToDevice) HSRING_CUDA(cudaMemcpyAsync(dev, host, bytes, kind, s));
            else HSRING_CUDA(cudaMemcpyAsync(host, dev, bytes, kind, s));
            HSRING_CUDA(cudaEventRecord(b, s));
            HSRING_CUDA(cudaEventSynchronize(b));
            float t = 0;
            HSRING_CUDA(cudaEventElapsedTime(&t, a, b));
            if (i > 0) ms.push_back(t);  // the first copy is a warm-up
        }
        std::sort(ms.begin(), ms.end());
        return double(bytes) / (ms[ms.size() / 2] * 1e-3) / 1e9;
    };
    PinnedBandwidth r{run(cudaMemcpyHostToDevice), run(cudaMemcpyDeviceToHost)};
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaStreamDestroy(s);
    cudaFree(dev);
    cudaFreeHost(host);
    return r;
}

bool available() { return device_count() > 0; }
#else
bool available() { return false; }
#endif

} // namespace hsring::cuda
