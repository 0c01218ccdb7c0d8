#pragma once
// Where a named shared-memory region (src/shm/region.hpp) lives and what backs it, for messages
// and status (Ring::region()).
#include <cstdint>
#include <string>

namespace hsring {

struct RegionInfo {
    std::string path;         // /dev/hugepages/NAME or /dev/shm/NAME
    bool huge_pages = false;
    std::uint64_t bytes = 0;
};

} // namespace hsring
