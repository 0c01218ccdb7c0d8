#pragma once
// Peak GPU memory of the caching allocator (where this build links c10_cuda; -1 elsewhere).
#include <cstdint>
#ifdef HSRING_HAVE_C10_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace hsring::bench {

inline void reset_peak_memory(bool cuda) {
#ifdef HSRING_HAVE_C10_CUDA
    if (cuda) c10::cuda::CUDACachingAllocator::resetPeakStats(0);
#endif
    (void)cuda;
}

inline double peak_memory_gib(bool cuda) {
#ifdef HSRING_HAVE_C10_CUDA
    if (!cuda) return -1;
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
    using c10::CachingAllocator::StatType;
    return static_cast<double>(stats.allocated_bytes[static_cast<std::size_t>(StatType::AGGREGATE)].peak) / (1u << 30);
#else
    (void)cuda;
    return -1;
#endif
}

} // namespace hsring::bench
