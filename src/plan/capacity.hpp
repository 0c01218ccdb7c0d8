#pragma once
// What the machine holds: GPU memory per device and host RAM, given on the command line or
// queried without linking CUDA: `nvidia-smi --query-gpu=memory.total` (when present) and
// /proc/meminfo. $HSRING_NVIDIA_SMI names another nvidia-smi (tests use a fake one).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hsring::plan {

struct Capacity {
    std::vector<std::uint64_t> gpu_bytes;  // per GPU index; empty when unknown
    std::string gpu_source;                // "--gpu-mem", "nvidia-smi", or why unknown
    std::optional<std::uint64_t> gpu_count;  // --gpus, else the number nvidia-smi listed
    std::string gpu_count_source;
    std::optional<std::uint64_t> host_bytes;
    std::string host_source;
    std::optional<std::uint64_t> huge_pages_total;  // HugePages_Total of /proc/meminfo

    // Capacity of GPU `index`, if known (--gpu-mem applies to every GPU).
    std::optional<std::uint64_t> gpu(int index) const;
    bool gpus_known() const { return !gpu_bytes.empty(); }
};

struct NvidiaSmi {
    std::vector<std::uint64_t> memory_bytes;  // one per GPU, in index order
    std::string error;                        // why nothing was listed
};

// Runs nvidia-smi (or $HSRING_NVIDIA_SMI); never throws.
NvidiaSmi query_nvidia_smi();

// gpu_mem / host_mem / gpus: command-line values; what is not given is queried.
Capacity query_capacity(std::optional<std::uint64_t> gpu_mem, std::optional<std::uint64_t> host_mem,
                        std::optional<std::uint64_t> gpus);

// MemTotal and HugePages_Total from a /proc/meminfo text (bytes, pages).
struct MemInfo {
    std::optional<std::uint64_t> total_bytes;
    std::optional<std::uint64_t> huge_pages_total;
};
MemInfo parse_meminfo(const std::string& text);

} // namespace hsring::plan
