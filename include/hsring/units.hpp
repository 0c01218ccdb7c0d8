#pragma once
// Byte sizes as people write them in TOML ("64GiB", "512 MiB", 1048576) and as we print them.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hsring {

inline constexpr std::uint64_t KiB = 1024ull;
inline constexpr std::uint64_t MiB = 1024ull * KiB;
inline constexpr std::uint64_t GiB = 1024ull * MiB;
inline constexpr std::uint64_t kHugePage = 2 * MiB;

// Parses "123", "64KiB", "1.5 GiB", "2MB" (SI) ...; nullopt when malformed or overflowing.
std::optional<std::uint64_t> parse_bytes(std::string_view text);

// "2.50 GiB", "512 MiB", "17 B".
std::string format_bytes(std::uint64_t bytes);

// "1,234,567": counts of tokens, parameters, samples in reports.
std::string format_count(std::uint64_t n);

constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

} // namespace hsring
