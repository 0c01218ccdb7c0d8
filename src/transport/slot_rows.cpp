#include "hsring/slot_rows.hpp"

#include "hsring/error.hpp"

#include <cstring>

namespace hsring {

FilledRows filled_rows(const RingGeometry& g, std::uint64_t n_tokens) {
    if (n_tokens > g.slot_tokens)
        fail("a batch of {} tokens does not fit a slot of {} tokens", n_tokens, g.slot_tokens);
    const std::uint64_t row = std::uint64_t{g.hidden} * g.dtype_bytes, stride = g.slot_tokens * row;
    if (n_tokens == g.slot_tokens) return {1, g.n_layers * stride, g.n_layers * stride};
    return {n_tokens ? g.n_layers : 0u, n_tokens * row, stride};
}

void copy_filled_rows(void* dst, const void* payload, const FilledRows& f) {
    auto* d = static_cast<std::byte*>(dst);
    const auto* s = static_cast<const std::byte*>(payload);
    for (std::uint64_t i = 0; i < f.runs; ++i) std::memcpy(d + i * f.stride, s + i * f.stride, f.run_bytes);
}

} // namespace hsring
