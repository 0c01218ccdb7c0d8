#include "hsring/log.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <string>

namespace hsring::log {
namespace {

std::string& name() {
    static std::string n = [] {
        const char* env = std::getenv("HSRING_WORKER_NAME");
        return std::string(env ? env : "hsring");
    }();
    return n;
}

Level initial_level() {
    const char* env = std::getenv("HSRING_LOG");
    if (!env) return Level::Info;
    std::string v(env);
    if (v == "debug") return Level::Debug;
    if (v == "warn") return Level::Warn;
    if (v == "error") return Level::Error;
    return Level::Info;
}

std::atomic<int> g_level{static_cast<int>(initial_level())};

} // namespace

void set_name(std::string n) { name() = std::move(n); }
void set_level(Level l) { g_level.store(static_cast<int>(l), std::memory_order_relaxed); }
bool enabled(Level l) { return static_cast<int>(l) >= g_level.load(std::memory_order_relaxed); }

void write(Level level, std::string_view message) {
    using namespace std::chrono;
    auto now = system_clock::now();
    std::time_t t = system_clock::to_time_t(now);
    std::tm tm{};
    localtime_r(&t, &tm);
    int ms = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
    static constexpr char kTag[] = {'D', 'I', 'W', 'E'};
    std::string line = fmt::format("{:02}:{:02}:{:02}.{:03} {} {} {}\n", tm.tm_hour, tm.tm_min,
                                   tm.tm_sec, ms, name(), kTag[static_cast<int>(level)], message);
    // One write per line (see header); a short write to a pipe is not worth retrying here.
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
}

} // namespace hsring::log
