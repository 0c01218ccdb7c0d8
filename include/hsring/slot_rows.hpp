#pragma once
// The part of a slot's payload a batch fills. A payload is [n_layers][slot_tokens][hidden]
// (RingGeometry); a batch of n tokens fills rows [0, n) of every layer, so a copy to a buffer
// of the same layout moves n_layers runs of n x hidden elements at the layer stride — not the
// whole slot, which packing often leaves far from full.
#include "hsring/ring.hpp"

#include <cstdint>

namespace hsring {

struct FilledRows {
    std::uint64_t runs = 0;       // n_layers, or 1 when the slot is full (the payload is one run)
    std::uint64_t run_bytes = 0;  // bytes of each run
    std::uint64_t stride = 0;     // bytes from one run to the next, in the payload and in the buffer
    std::uint64_t bytes() const { return runs * run_bytes; }
};

// Throws hsring::Error when n_tokens exceeds the slot's capacity.
FilledRows filled_rows(const RingGeometry& g, std::uint64_t n_tokens);

// Host copy of the filled rows of `payload` into `dst` (a buffer with the payload's layout).
void copy_filled_rows(void* dst, const void* payload, const FilledRows& f);

} // namespace hsring
