#pragma once
// What fixes the ring's shared layout: slot count and size, metadata capacities, the payload's
// shape. Config-free: `derive` (src/config) fills one from a run's config (Derived::ring), the
// ring (src/ring) lays its region out from it. Two processes agree on the layout iff their
// geometries hash equal (the hash also covers the layout version).
#include "hsring/units.hpp"

#include <cstdint>
#include <string>

namespace hsring {

struct RingGeometry {
    std::uint32_t slot_count = 0;
    std::uint64_t slot_bytes = 0;    // payload capacity per slot (rounded up to 2 MiB in the layout)
    std::uint64_t slot_tokens = 0;   // token capacity per slot (metadata arrays)
    std::uint32_t max_samples = 0;   // samples per slot (metadata arrays)
    std::uint32_t n_layers = 0;      // payload = [n_layers][slot_tokens][hidden] of dtype_bytes
    std::uint32_t hidden = 0;
    std::uint32_t dtype_bytes = 0;

    // The distance between two slots' payloads: whole huge pages, so each payload starts on one.
    static constexpr std::uint64_t payload_stride(std::uint64_t slot_bytes) { return align_up(slot_bytes, kHugePage); }
    std::uint64_t payload_stride() const { return payload_stride(slot_bytes); }

    std::uint64_t layout_hash() const;  // src/ring/layout.cpp
    std::string str() const;
};

} // namespace hsring
