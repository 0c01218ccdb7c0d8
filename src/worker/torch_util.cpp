#include "worker/torch_util.hpp"

#include "hsring/error.hpp"
#include "hsring/log.hpp"

#include <ATen/Parallel.h>

#include <cstdlib>
#include <thread>

#ifdef HSRING_TORCH_CUDA
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

} // namespace hsring::worker
