#pragma once
// Option values shared by the hsring-model subcommands: numbers and --device, with errors that
// name the subcommand (`cmd`) and the option.
#include "model/tools/commands.hpp"

#include <ATen/core/Tensor.h>
#include <fmt/format.h>

#include <charconv>
#include <string>
#include <type_traits>

namespace hsring::model::tools {

// `v` as a T, whole (no trailing characters); a UsageError otherwise.
template <typename T>
T number(const char* cmd, const std::string& opt, const std::string& v) {
    T x{};
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec != std::errc() || ptr != v.data() + v.size())
        throw UsageError(fmt::format("{}: {} '{}' is not a {}number", cmd, opt, v,
                                     std::is_integral_v<T> ? "non-negative whole " : ""));
    return x;
}

// --device: "cpu", "cuda", "cuda:I"; CUDA must be there (an hsring::Error otherwise).
at::Device parse_device(const char* cmd, const std::string& s);

} // namespace hsring::model::tools
