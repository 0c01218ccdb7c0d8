#pragma once
// A named shared-memory region: a file on a hugetlbfs mount (2 MiB pages) or in /dev/shm.
//
// Raw POSIX rather than Boost.Interprocess's shared_memory_object: creation needs fallocate (so
// "not enough memory / huge pages" is a start-up error, never a SIGBUS mid-run), hugetlbfs
// files and an atomic rename; Boost exposes none of these.
//
// Creation is all-or-nothing: the file is built under a temporary name, sized, reserved,
// initialised by the caller, and only then renamed to its final name.
#include "hsring/huge_pages.hpp"
#include "hsring/region_info.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace hsring::shm {

struct HugePageProbe {
    std::string mount;            // a hugetlbfs mount with 2 MiB pages, "" if none
    std::uint64_t free_pages = 0; // HugePages_Free - HugePages_Rsvd
    std::uint64_t page_bytes = 0;
};
// Reads /proc/mounts and /proc/meminfo. HSRING_HUGETLBFS=PATH|none overrides the mount (tests).
HugePageProbe probe_huge_pages();
// Directory for non-huge-page regions: $HSRING_SHM_DIR or /dev/shm.
std::string shm_dir();

class Region {
public:
    // `init(base)` fills the region before it gets its name. Throws hsring::Error (nothing is
    // left behind) if the name exists, memory cannot be reserved, or huge pages are required
    // but unavailable.
    static std::unique_ptr<Region> create(std::string_view name, std::uint64_t bytes, HugePages hp,
                                          bool prefault, const std::function<void(std::byte*)>& init);
    // Maps an existing region; throws naming where it looked.
    static std::unique_ptr<Region> open(std::string_view name);
    // Path of an existing region by that name, "" if none.
    static std::string find(std::string_view name);
    static bool remove(std::string_view name);

    ~Region();
    Region(const Region&) = delete;
    Region& operator=(const Region&) = delete;

    std::byte* base() const { return base_; }
    std::uint64_t size() const { return info_.bytes; }
    const RegionInfo& info() const { return info_; }

private:
    Region() = default;
    std::byte* base_ = nullptr;
    RegionInfo info_;
};

} // namespace hsring::shm
