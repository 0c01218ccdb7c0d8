#pragma once
// splitmix64 (Steele, Lea, Flood 2014): a tiny, fully specified 64-bit generator and mixer.
// Used wherever a number must be the same on every machine and standard library: the epoch
// shuffle and the data set fingerprint.
#include <cstdint>

namespace hsring::data::detail {

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// The splitmix64 output function: a bijective 64-bit mix.
constexpr std::uint64_t mix64(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

class SplitMix64 {
public:
    explicit constexpr SplitMix64(std::uint64_t seed) : state_(seed) {}
    constexpr std::uint64_t next() { return mix64(state_ += kGolden); }

    // Uniform in [0, bound), bound > 0, without modulo bias (Lemire's multiply-and-reject).
    constexpr std::uint64_t below(std::uint64_t bound) {
        __uint128_t m = static_cast<__uint128_t>(next()) * bound;
        auto low = static_cast<std::uint64_t>(m);
        if (low < bound) {
            const std::uint64_t threshold = (0 - bound) % bound;
            while (low < threshold) {
                m = static_cast<__uint128_t>(next()) * bound;
                low = static_cast<std::uint64_t>(m);
            }
        }
        return static_cast<std::uint64_t>(m >> 64);
    }

private:
    std::uint64_t state_;
};

// An order-dependent 64-bit hash of a stream of 64-bit words.
class Hash64 {
public:
    explicit constexpr Hash64(std::uint64_t seed) : h_(mix64(seed)) {}
    constexpr void add(std::uint64_t word) {
        h_ = (h_ ^ mix64(word + kGolden)) * 0x100000001B3ull;  // mix, then FNV-prime multiply
        h_ = (h_ << 29) | (h_ >> 35);
    }
    constexpr std::uint64_t value() const { return mix64(h_); }

private:
    std::uint64_t h_;
};

} // namespace hsring::data::detail
