#pragma once
// Shared by the ring tests and their worker program: names, a payload pattern and checksum.
#include "hsring/ring.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <span>
#include <string>

namespace hsring::test {

// A ring name unique to this process and call.
inline std::string unique_ring_name(const char* tag) {
    static std::atomic<int> n{0};
    return "hsring-test-" + std::string(tag) + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

inline RingGeometry small_geometry(std::uint32_t slots = 4, std::uint64_t slot_bytes = 64 * 1024) {
    RingGeometry g;
    g.slot_count = slots;
    g.slot_bytes = slot_bytes;
    g.slot_tokens = 64;
    g.max_samples = 8;
    g.n_layers = 1;
    g.hidden = static_cast<std::uint32_t>(slot_bytes / 64 / 2);
    g.dtype_bytes = 2;
    return g;
}

inline std::uint64_t mix(std::uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

// Fills `out` with a pattern that depends on `id` and returns its checksum.
inline std::uint64_t fill_pattern(std::span<std::byte> out, std::uint64_t id) {
    auto* w = reinterpret_cast<std::uint64_t*>(out.data());
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < out.size() / 8; ++i) {
        w[i] = mix(id * 0x9e3779b97f4a7c15ull + i);
        sum = mix(sum ^ w[i]);
    }
    return sum;
}

inline std::uint64_t checksum(std::span<const std::byte> in) {
    auto* w = reinterpret_cast<const std::uint64_t*>(in.data());
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < in.size() / 8; ++i) sum = mix(sum ^ w[i]);
    return sum;
}

} // namespace hsring::test
