#pragma once
// A RunTag (hsring/run_tag.hpp) as it sits in a shared-memory header: standard layout, no
// pointers, written once by the creator before the object gets its name.
//
//   run_dir[416] (NUL-terminated) | layout_hash | data_fingerprint | owner_uid | node_rank | nnodes
#include "hsring/run_tag.hpp"

#include <cstdint>
#include <type_traits>

namespace hsring::shm {

struct RunTagBlock {
    char run_dir[416];
    std::uint64_t layout_hash;
    std::uint64_t data_fingerprint;
    std::uint32_t owner_uid;
    std::uint32_t node_rank;
    std::uint32_t nnodes;
    std::uint32_t reserved;

    // Throws hsring::Error if the run dir does not fit (a run dir is shorter anyway: its control
    // socket path must fit in 107 bytes).
    void store(const RunTag& tag);
    RunTag load() const;
};
static_assert(std::is_standard_layout_v<RunTagBlock>);
static_assert(sizeof(RunTagBlock) == 448);

} // namespace hsring::shm
