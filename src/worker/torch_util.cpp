#include "worker/torch_util.hpp"

#include "hsring/error.hpp"

#ifdef HSRING_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
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
