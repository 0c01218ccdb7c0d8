#include "worker/torch/torch_util.hpp"

#include "hsring/error.hpp"
#include "hsring/log.hpp"

#include <ATen/Parallel.h>

#include <cstdlib>
#include <thread>

#include <chrono>

#ifdef HSRING_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif
#ifdef HSRING_HAVE_C10_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace hsring::worker {

at::ScalarType scalar_type(DType t) {
    switch (t) {
    case DType::BF16: return at::kBFloat16;
    case DType::F16: return at::kHalf;
    case DType::F32: return at::kFloat;
    }
    return at::kFloat;
}

at::Device worker_device(bool cuda) {
    if (!cuda) return at::kCPU;
#ifdef HSRING_TORCH_CUDA
    if (c10::cuda::device_count() < 1)
        fail("this worker was placed on a GPU but CUDA sees none (CUDA_VISIBLE_DEVICES={})",
             std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "unset");
    return at::Device(at::kCUDA, 0);
#else
    fail("this worker was placed on a GPU but hsring was built without torch_cuda: rebuild where a GPU is "
         "visible (bin/gpu-build), or use \"cpu\" places in [topology]");
#endif
}

transport::GpuStream current_stream(const at::Device& d) {
#ifdef HSRING_HAVE_C10_CUDA
    if (d.is_cuda()) return c10::cuda::getCurrentCUDAStream(d.index()).stream();
#endif
    (void)d;
    return nullptr;
}

void configure_cpu_threads(const Config& cfg) {
    if (std::getenv("OMP_NUM_THREADS")) return;
    unsigned cpu_workers = 0;
    for (const auto& p : cfg.topology.targets) cpu_workers += p.is_cpu();
    for (const auto& p : cfg.topology.drafters) cpu_workers += p.is_cpu();
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const int threads = static_cast<int>(std::max(1u, cores / std::max(1u, cpu_workers)));
    at::set_num_threads(threads);
    log::debug("{} intra-op thread(s) ({} cores, {} CPU workers)", threads, cores, cpu_workers);
}

std::uint64_t device_peak_bytes(const at::Device& d) {
#ifdef HSRING_TORCH_CUDA
    if (d.is_cuda()) {
        auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(d.index());
        return static_cast<std::uint64_t>(
            stats.allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak);
    }
#endif
    (void)d;
    return 0;
}

struct DeviceTimer::Impl {
    bool cuda = false;
    std::chrono::steady_clock::time_point t0, t1;
#ifdef HSRING_TORCH_CUDA
    at::cuda::CUDAEvent e0{cudaEventDefault}, e1{cudaEventDefault};
#endif
};

DeviceTimer::DeviceTimer(const at::Device& d) : impl_(std::make_unique<Impl>()) { impl_->cuda = d.is_cuda(); }
DeviceTimer::~DeviceTimer() = default;

void DeviceTimer::start() {
#ifdef HSRING_TORCH_CUDA
    if (impl_->cuda) return impl_->e0.record();
#endif
    impl_->t0 = std::chrono::steady_clock::now();
}

void DeviceTimer::stop() {
#ifdef HSRING_TORCH_CUDA
    if (impl_->cuda) return impl_->e1.record();
#endif
    impl_->t1 = std::chrono::steady_clock::now();
}

double DeviceTimer::seconds() {
#ifdef HSRING_TORCH_CUDA
    if (impl_->cuda) {
        impl_->e1.synchronize();
        return impl_->e0.elapsed_time(impl_->e1) / 1000.0;
    }
#endif
    return std::chrono::duration<double>(impl_->t1 - impl_->t0).count();
}

} // namespace hsring::worker
