// Fault injection (see hsring/fault.hpp).
#include "hsring/fault.hpp"

#include "hsring/error.hpp"
#include "hsring/log.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

namespace hsring::fault {

namespace {

enum class Action { Throw, Kill, Hold, Int, Nan };
enum class Who { Target, Drafter, Supervisor, Any };

// Every point a process passes (CONTRACT.md, "Fault injection"); `nan`: it is a poison() point.
struct PointInfo {
    std::string_view name;
    Who who;
    bool nan;
};
constexpr PointInfo kPoints[] = {
    {"write", Who::Target, false},       {"hidden", Who::Target, true},      {"restore", Who::Drafter, false},
    {"stage", Who::Drafter, false},      {"train", Who::Drafter, false},     {"grad", Who::Drafter, true},
    {"checkpoint", Who::Drafter, false}, {"commit", Who::Drafter, false},    {"done", Who::Drafter, false},
    {"rebuild", Who::Supervisor, false},
};

struct Fault {
    std::string who, point;
    unsigned long n = 0;
    Action action = Action::Throw;
    unsigned long seen = 0;
};

std::mutex g_mutex;
std::string g_name;
std::optional<Topology> g_topology;  // known after configure(): ranks are checked too
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

std::string names(const char* role, const std::optional<Topology>& t) {
    if (!t) return fmt::format("{}.N", role);
    const std::uint32_t n = std::string_view(role) == "target" ? t->targets : t->drafters;
    if (n == 0) return fmt::format("(no {}s)", role);
    if (n == 1) return fmt::format("{}.0", role);
    if (n == 2) return fmt::format("{0}.0, {0}.1", role);
    return fmt::format("{0}.0..{0}.{1}", role, n - 1);
}

std::string points_of(Who who) {
    std::string s;
    for (const PointInfo& p : kPoints)
        if (p.who == who) s += fmt::format("{}{}", s.empty() ? "" : ", ", p.name);
    return s;
}

// What HSRING_FAULT may say, for every error message.
std::string valid_text(const std::optional<Topology>& t) {
    return fmt::format("valid: <who> {}, {}, target.*, drafter.*, * or supervisor; <point> for targets {}, for "
                       "drafters {}, for the supervisor {}; <n> >= 1; <action> throw (default), kill, hold, int, "
                       "nan (only at hidden and grad) (src/worker/CONTRACT.md, \"Fault injection\")",
                       names("target", t), names("drafter", t), points_of(Who::Target), points_of(Who::Drafter),
                       points_of(Who::Supervisor));
}

// The role <who> names, or nullopt when it names no worker of `t` (any rank when `t` is unknown).
std::optional<Who> who_of(const std::string& who, const std::optional<Topology>& t) {
    if (who == "*") return Who::Any;
    if (who == "supervisor") return Who::Supervisor;
    for (auto [prefix, role] : {std::pair{std::string_view("target."), Who::Target}, {"drafter.", Who::Drafter}}) {
        if (!who.starts_with(prefix)) continue;
        const std::string_view rest = std::string_view(who).substr(prefix.size());
        if (rest == "*") return role;
        std::uint32_t rank = 0;
        const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), rank);
        if (rest.empty() || ec != std::errc() || ptr != rest.data() + rest.size() || (rest.size() > 1 && rest[0] == '0'))
            return std::nullopt;
        if (t && rank >= (role == Who::Target ? t->targets : t->drafters)) return std::nullopt;
        return role;
    }
    return std::nullopt;
}

// Parses and checks every item of `spec` (all of them, not only this process's: a misspelled
// worker name matches nobody and would never fire).
std::vector<Fault> parse(const std::string& spec, const std::optional<Topology>& t) {
    std::vector<Fault> out;
    if (spec.empty()) return out;
    for (const std::string& item : split(spec, ',')) {
        const auto f = split(item, ':');
        unsigned long n = 0;
        const bool n_ok = f.size() >= 3 && !f[2].empty() &&
                          std::from_chars(f[2].data(), f[2].data() + f[2].size(), n).ptr == f[2].data() + f[2].size();
        if (f.size() < 3 || f.size() > 4 || f[0].empty() || f[1].empty() || !n_ok || n == 0)
            fail("HSRING_FAULT: '{}' is not <who>:<point>:<n>[:<action>] with n >= 1; {}", item, valid_text(t));
        Fault x{f[0], f[1], n};
        const auto who = who_of(x.who, t);
        if (!who)
            fail("HSRING_FAULT: '{}': '{}' is no worker of this run{}; {}", item, x.who,
                 t ? fmt::format(" (targets: {}, drafters: {})", t->targets, t->drafters) : "", valid_text(t));
        const PointInfo* p = nullptr;
        for (const PointInfo& k : kPoints)
            if (k.name == x.point && (*who == Who::Any || k.who == *who)) p = &k;
        if (!p) fail("HSRING_FAULT: '{}': '{}' never passes a point '{}'; {}", item, x.who, x.point, valid_text(t));
        const std::string a = f.size() == 4 ? f[3] : "throw";
        if (a == "throw") x.action = Action::Throw;
        else if (a == "kill") x.action = Action::Kill;
        else if (a == "hold") x.action = Action::Hold;
        else if (a == "int") x.action = Action::Int;
        else if (a == "nan") x.action = Action::Nan;
        else fail("HSRING_FAULT: '{}': unknown action '{}'; {}", item, a, valid_text(t));
        if (x.action == Action::Nan && !p->nan)
            fail("HSRING_FAULT: '{}': nan poisons numbers only at hidden (targets) and grad (drafters), not at '{}'; {}",
                 item, x.point, valid_text(t));
        out.push_back(std::move(x));
    }
    return out;
}

std::string env_spec() {
    const char* spec = std::getenv("HSRING_FAULT");
    return spec ? spec : "";
}

void parse_locked() {
    if (g_name.empty())
        if (const char* n = std::getenv("HSRING_WORKER_NAME")) g_name = n;
    g_faults.clear();
    for (Fault& f : parse(env_spec(), g_topology))
        if (matches(f.who, g_name)) g_faults.push_back(std::move(f));
    g_parsed = true;
    g_any.store(!g_faults.empty(), std::memory_order_relaxed);
}

// One pass of point `name`; true when a nan fault fires (only where `poison_point`).
bool pass(const char* name, bool poison_point) {
    if (!g_any.load(std::memory_order_relaxed)) return false;
    Action action;
    std::string what;
    {
        std::lock_guard lock(g_mutex);
        if (!g_parsed) parse_locked();
        Fault* hit = nullptr;
        for (Fault& f : g_faults)
            if (f.point == name && ++f.seen == f.n) hit = &f;
        if (!hit) return false;
        action = hit->action;
        HSRING_ASSERT(action != Action::Nan || poison_point,
                      "a nan fault reached fault::point(\"{}\"): a point that takes nan must call fault::poison()", name);
        what = fmt::format("HSRING_FAULT {}:{}:{}{}: injected fault in {} at pass {} of point '{}'", hit->who, hit->point,
                           hit->n, action == Action::Nan ? ":nan" : "", g_name.empty() ? "this process" : g_name,
                           hit->n, name);
    }
    log::warn("{}", what);
    switch (action) {
    case Action::Throw: throw Injected(what);
    case Action::Kill: ::kill(::getpid(), SIGKILL); break;
    case Action::Hold:
        for (;;) ::pause();
    case Action::Int: ::kill(::getpid(), SIGINT); break;
    case Action::Nan: return true;
    }
    return false;
}

} // namespace

void validate(const std::string& spec, const Topology& topology) { (void)parse(spec, topology); }

void configure(const std::string& name, const Topology& topology) {
    std::lock_guard lock(g_mutex);
    g_name = name;
    g_topology = topology;
    g_parsed = false;
    g_any.store(true, std::memory_order_relaxed);
    parse_locked();  // throws: a bad spec is refused now
}

void set_process_name(const std::string& name) {
    std::lock_guard lock(g_mutex);
    g_name = name;
    g_topology.reset();
    g_faults.clear();
    g_parsed = false;
    g_any.store(true, std::memory_order_relaxed);
}

void point(const char* name) { (void)pass(name, false); }

bool poison(const char* name) { return pass(name, true); }

} // namespace hsring::fault
