#pragma once
// Line-oriented logging to stderr: "12:03:04.123 target.0 I message". Each line is written with
// one write(2) so lines from several processes sharing a log file never interleave mid-line.
#include <fmt/format.h>

#include <string>
#include <string_view>

namespace hsring::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3 };

void set_name(std::string name);   // e.g. "target.0"; default: program name
void set_level(Level level);       // default Info; HSRING_LOG=debug|info|warn|error overrides
bool enabled(Level level);
void write(Level level, std::string_view message);

template <typename... A> void debug(fmt::format_string<A...> f, A&&... a) {
    if (enabled(Level::Debug)) write(Level::Debug, fmt::format(f, std::forward<A>(a)...));
}
template <typename... A> void info(fmt::format_string<A...> f, A&&... a) {
    if (enabled(Level::Info)) write(Level::Info, fmt::format(f, std::forward<A>(a)...));
}
template <typename... A> void warn(fmt::format_string<A...> f, A&&... a) {
    if (enabled(Level::Warn)) write(Level::Warn, fmt::format(f, std::forward<A>(a)...));
}
template <typename... A> void error(fmt::format_string<A...> f, A&&... a) {
    write(Level::Error, fmt::format(f, std::forward<A>(a)...));
}

} // namespace hsring::log
