#include "hsring/units.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>

namespace hsring {

std::optional<std::uint64_t> parse_bytes(std::string_view s) {
    auto trim = [](std::string_view v) {
        while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.remove_prefix(1);
        while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.remove_suffix(1);
        return v;
    };
    s = trim(s);
    std::size_t i = 0;
    while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
    if (i == 0) return std::nullopt;
    double number = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + i, number);
    if (ec != std::errc{} || p != s.data() + i || number < 0) return std::nullopt;
    std::string unit;
    for (char c : trim(s.substr(i))) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    struct U { const char* name; double mult; };
    static constexpr std::array<U, 13> units{{
        {"", 1}, {"b", 1}, {"kib", 0x1p10}, {"mib", 0x1p20}, {"gib", 0x1p30}, {"tib", 0x1p40},
        {"k", 1e3}, {"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}, {"m", 1e6}, {"g", 1e9}}};
    for (const auto& u : units) {
        if (unit == u.name) {
            double v = number * u.mult;
            if (!(v < 0x1p63) || v != std::floor(v)) return std::nullopt;
            return static_cast<std::uint64_t>(v);
        }
    }
    return std::nullopt;
}

std::string format_bytes(std::uint64_t b) {
    if (b >= GiB) return fmt::format("{:.2f} GiB", double(b) / double(GiB));
    if (b >= MiB) return fmt::format("{:.2f} MiB", double(b) / double(MiB));
    if (b >= KiB) return fmt::format("{:.2f} KiB", double(b) / double(KiB));
    return fmt::format("{} B", b);
}

std::string format_count(std::uint64_t n) {
    std::string s = std::to_string(n);
    for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<std::size_t>(i), ",");
    return s;
}

} // namespace hsring
