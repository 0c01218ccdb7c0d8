#pragma once
// GPU memory of the caching allocator (where this build links c10_cuda; 0 or -1 elsewhere):
// what is allocated now, its peak since the last reset, and the peak reserved (allocated plus
// cached blocks: what the device holds for torch).
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

struct MemoryStats {
    std::uint64_t allocated = 0, peak_allocated = 0, peak_reserved = 0;
};

inline MemoryStats memory_stats(bool cuda) {
    MemoryStats m;
#ifdef HSRING_HAVE_C10_CUDA
    if (cuda) {
        auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
        using c10::CachingAllocator::StatType;
        const auto agg = static_cast<std::size_t>(StatType::AGGREGATE);
        m.allocated = static_cast<std::uint64_t>(s.allocated_bytes[agg].current);
        m.peak_allocated = static_cast<std::uint64_t>(s.allocated_bytes[agg].peak);
        m.peak_reserved = static_cast<std::uint64_t>(s.reserved_bytes[agg].peak);
    }
#endif
    (void)cuda;
    return m;
}

inline double peak_memory_gib(bool cuda) {
#ifdef HSRING_HAVE_C10_CUDA
    if (!cuda) return -1;
    return static_cast<double>(memory_stats(cuda).peak_allocated) / (1u << 30);
#else
    (void)cuda;
    return -1;
#endif
}

} // namespace hsring::bench
