// Fault injection (see hsring/fault.hpp).
#include "hsring/fault.hpp"

#include "hsring/error.hpp"
#include "hsring/log.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace hsring::fault {

namespace {

enum class Action { Throw, Kill, Hold, Int, Nan };

struct Fault {
    std::string who, point;
    unsigned long n = 0;
    Action action = Action::Throw;
    unsigned long seen = 0;
};

std::mutex g_mutex;
std::string g_name;
bool g_parsed = false;
std::vector<Fault> g_faults;
std::atomic<bool> g_any{true};  // until parsed: there may be faults

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::size_t b = 0;
    for (;;) {
        const std::size_t e = s.find(sep, b);
        out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
        if (e == std::string::npos) return out;
        b = e + 1;
    }
}

bool matches(const std::string& who, const std::string& name) {
    if (who == "*" || who == name) return true;
    if (who.size() > 2 && who.ends_with(".*")) return name.rfind(who.substr(0, who.size() - 1), 0) == 0;
    return false;
}

void parse_locked() {
    g_parsed = true;
    if (g_name.empty())
        if (const char* n = std::getenv("HSRING_WORKER_NAME")) g_name = n;
    const char* spec = std::getenv("HSRING_FAULT");
    if (spec && *spec) {
        for (const std::string& item : split(spec, ',')) {
            const auto f = split(item, ':');
            char* end = nullptr;
            const unsigned long n = f.size() >= 3 ? std::strtoul(f[2].c_str(), &end, 10) : 0;
            if (f.size() < 3 || f.size() > 4 || f[0].empty() || f[1].empty() || n == 0 || !end || *end)
                fail("HSRING_FAULT: '{}' is not <who>:<point>:<n>[:<action>] with n >= 1 (src/worker/CONTRACT.md)", item);
            Fault x{f[0], f[1], n};
            const std::string a = f.size() == 4 ? f[3] : "throw";
            if (a == "throw") x.action = Action::Throw;
            else if (a == "kill") x.action = Action::Kill;
            else if (a == "hold") x.action = Action::Hold;
            else if (a == "int") x.action = Action::Int;
            else if (a == "nan") x.action = Action::Nan;
            else fail("HSRING_FAULT: '{}': unknown action '{}' (throw, kill, hold, int, nan)", item, a);
            if (matches(x.who, g_name)) g_faults.push_back(x);
        }
    }
    g_any.store(!g_faults.empty(), std::memory_order_relaxed);
}

} // namespace

void set_process_name(const std::string& name) {
    std::lock_guard lock(g_mutex);
    g_name = name;
    g_faults.clear();
    g_parsed = false;
    g_any.store(true, std::memory_order_relaxed);
}

namespace {
// Counts a pass of `name`; true when a fault fires here (its action and message out).
bool hit_at(const char* name, Action& action, std::string& what) {
    if (!g_any.load(std::memory_order_relaxed)) return false;
    std::lock_guard lock(g_mutex);
    if (!g_parsed) parse_locked();
    Fault* hit = nullptr;
    for (Fault& f : g_faults)
        if (f.point == name && ++f.seen == f.n) hit = &f;
    if (!hit) return false;
    action = hit->action;
    what = fmt::format("HSRING_FAULT {}:{}:{}: injected fault in {} at pass {} of point '{}'", hit->who, hit->point,
                       hit->n, g_name.empty() ? "this process" : g_name, hit->n, name);
    return true;
}

void act(Action action, const std::string& what) {
    log::warn("{}", what);
    switch (action) {
    case Action::Throw: throw Injected(what);
    case Action::Kill: ::kill(::getpid(), SIGKILL); break;
    case Action::Hold:
        for (;;) ::pause();
    case Action::Int: ::kill(::getpid(), SIGINT); break;
    case Action::Nan: break;  // poison() tells its caller
    }
}
} // namespace

void point(const char* name) {
    Action action;
    std::string what;
    if (hit_at(name, action, what)) act(action, what);
}

bool poison(const char* name) {
    Action action;
    std::string what;
    if (!hit_at(name, action, what)) return false;
    act(action, what);
    return action == Action::Nan;
}

} // namespace hsring::fault
