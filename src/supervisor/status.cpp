// Run status: collection into JSON and rendering (see status.hpp).
#include "supervisor/status.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>

namespace hsring::supervisor {

using nlohmann::json;

namespace {
// Workers publish at least once a second (CONTRACT.md); a drafter's long step may take several.
constexpr double kStaleHeartbeatS = 30.0;
std::string duration(double s);
} // namespace

RateMeter::Rate RateMeter::update(const std::string& worker, const WorkerStats& s) {
    Track& t = tracks_[worker];
    if (t.pid != s.pid) t = Track{s.pid, {}, {}};  // a new process: its counters started again
    if (!t.points.empty() && s.heartbeat_ns <= t.points.back().heartbeat_ns) return t.rate;  // nothing new
    t.points.push_back({s.heartbeat_ns, s.samples, s.tokens, s.busy_ns, s.wait_ns});
    const auto window = static_cast<std::uint64_t>(kWindowS * 1e9);
    while (t.points.size() > 2 && s.heartbeat_ns - t.points[1].heartbeat_ns >= window) t.points.pop_front();
    const Point& a = t.points.front();
    const Point& b = t.points.back();
    const double dt = static_cast<double>(b.heartbeat_ns - a.heartbeat_ns) * 1e-9;
    if (dt > 0 && b.samples >= a.samples && b.tokens >= a.tokens)
        t.rate = {static_cast<double>(b.samples - a.samples) / dt, static_cast<double>(b.tokens - a.tokens) / dt,
                  t.rate.wait_fraction};
    if (b.busy_ns >= a.busy_ns && b.wait_ns >= a.wait_ns && (b.busy_ns - a.busy_ns) + (b.wait_ns - a.wait_ns) > 0)
        t.rate.wait_fraction = static_cast<double>(b.wait_ns - a.wait_ns) /
                               static_cast<double>((b.busy_ns - a.busy_ns) + (b.wait_ns - a.wait_ns));
    return t.rate;
}

RateMeter::Rate RateMeter::last(const std::string& worker) const {
    auto it = tracks_.find(worker);
    return it == tracks_.end() ? Rate{} : it->second.rate;
}

namespace {

// Which side of the ring waits for the other, and what to change about it.
json balance(double targets_wait, double drafters_wait) {
    json b = {{"targets_wait", targets_wait < 0 ? json(nullptr) : json(targets_wait)},
              {"drafters_wait", drafters_wait < 0 ? json(nullptr) : json(drafters_wait)},
              {"bottleneck", "none"}, {"advice", ""}};
    if (targets_wait < 0 || drafters_wait < 0) return b;
    if (targets_wait > 0.5 && drafters_wait < 0.1) {
        b["bottleneck"] = "drafters";
        b["advice"] = fmt::format("the targets wait {:.0f}% of their time for a free slot: the drafters are the "
                                  "bottleneck; add drafter GPUs ([topology] drafters) or move a target's GPU to the "
                                  "drafters (hsring plan CONFIG --measure computes the split)", 100 * targets_wait);
    } else if (drafters_wait > 0.5 && targets_wait < 0.1) {
        b["bottleneck"] = "targets";
        b["advice"] = fmt::format("the drafters wait {:.0f}% of their time for data: the targets are the bottleneck; "
                                  "add target GPUs ([topology] targets) or move a drafter's GPU to the targets (hsring "
                                  "plan CONFIG --measure computes the split)", 100 * drafters_wait);
    }
    return b;
}

} // namespace

json status_json(const StatusInputs& in) {
    json workers = json::array();
    double wait_sum[2] = {0, 0};
    int wait_n[2] = {0, 0};
    json rates = {{"target", {{"samples_per_s", 0.0}, {"tokens_per_s", 0.0}}},
                  {"drafter", {{"samples_per_s", 0.0}, {"tokens_per_s", 0.0}}}};
    json drafter = {{"step", nullptr}, {"loss", nullptr}};
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    const double now_s = static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
    for (const auto& w : in.workers) {
        json j = {{"name", w.name}, {"role", w.role}, {"rank", w.rank}, {"place", w.place},
                  {"pid", w.pid > 0 ? json(w.pid) : json(nullptr)}, {"state", w.state},
                  {"restarts", w.restarts}, {"incarnation", w.incarnation},
                  {"last_exit", w.last_exit.empty() ? json(nullptr) : json(w.last_exit)}, {"log", w.log},
                  {"holds", {{"writing", w.writing}, {"reading", w.reading}}}};
        if (w.suspended) j["state"] = "suspended";
        if (w.has_stats) {
            j["samples"] = w.stats.samples;
            j["tokens"] = w.stats.tokens;
            j["slots"] = w.stats.slots;
            // A worker that publishes nothing any more makes no progress: no stale rates for it.
            const double age = std::max(0.0, now_s - static_cast<double>(w.stats.heartbeat_ns) * 1e-9);
            const bool idle = w.suspended || age > kStaleHeartbeatS;
            j["samples_per_s"] = idle ? 0.0 : w.rate.samples_per_s;
            j["tokens_per_s"] = idle ? 0.0 : w.rate.tokens_per_s;
            j["heartbeat_age_s"] = age;
            auto& r = rates[w.role];
            r["samples_per_s"] = r["samples_per_s"].get<double>() + j["samples_per_s"].get<double>();
            r["tokens_per_s"] = r["tokens_per_s"].get<double>() + j["tokens_per_s"].get<double>();
            if (w.rate.wait_fraction >= 0) {
                j["wait_fraction"] = w.rate.wait_fraction;
                const int k = w.role == "target" ? 0 : 1;
                wait_sum[k] += w.rate.wait_fraction;
                ++wait_n[k];
            }
            if (w.role == "drafter") {
                j["step"] = w.stats.step;
                j["loss"] = w.stats.loss;
                if (w.rank == 0) drafter = {{"step", w.stats.step}, {"loss", w.stats.loss}};
            }
        }
        workers.push_back(std::move(j));
    }
    const double targets_wait = wait_n[0] ? wait_sum[0] / wait_n[0] : -1;
    const double drafters_wait = wait_n[1] ? wait_sum[1] / wait_n[1] : -1;
    if (targets_wait >= 0) rates["target"]["wait_fraction"] = targets_wait;
    if (drafters_wait >= 0) rates["drafter"]["wait_fraction"] = drafters_wait;
    const auto& c = in.counters;
    return {
        {"run", {{"name", in.name}, {"run_dir", in.run_dir}, {"config", in.config}, {"pid", in.pid},
                 {"phase", in.phase}, {"uptime_s", in.uptime_s}, {"mode", in.mode}}},
        {"workers", workers},
        {"ring", {{"name", in.ring_name}, {"slots", in.slots}, {"free", in.occupancy.free},
                  {"writing", in.occupancy.writing}, {"ready", in.occupancy.ready},
                  {"reading", in.occupancy.reading}, {"stopping", in.stopping},
                  {"counters", {{"commits", c.commits}, {"releases", c.releases}, {"aborts", c.aborts},
                                {"put_backs", c.put_backs}, {"reclaimed_writing", c.reclaimed_writing},
                                {"reclaimed_reading", c.reclaimed_reading}, {"redeliveries", c.redeliveries},
                                {"peer_lost", c.peer_lost}}}}},
        {"ledger", {{"name", in.ledger_name}, {"total", in.total}, {"pending", in.counts.pending},
                    {"in_slot", in.counts.in_slot}, {"consumed", in.counts.consumed},
                    {"durable", in.counts.durable}, {"rejected", in.counts.rejected}, {"done", in.done}}},
        {"rates", rates},
        {"balance", balance(targets_wait, drafters_wait)},
        {"drafter", drafter},
        {"spec", in.spec},
        {"gang", {{"world", in.world}, {"reformations", in.reformations}, {"reformations_total", in.reformations_total}}},
    };
}

namespace {

std::string human(double v) {
    if (v >= 1e9) return fmt::format("{:.1f}G", v / 1e9);
    if (v >= 1e6) return fmt::format("{:.1f}M", v / 1e6);
    if (v >= 1e4) return fmt::format("{:.1f}k", v / 1e3);
    if (v >= 10) return fmt::format("{:.0f}", v);
    return fmt::format("{:.1f}", v);
}

std::string duration(double s) {
    const auto t = static_cast<long>(s);
    if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t / 60) % 60);
    if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
    return fmt::format("{}s", t);
}

// [##==+.....]: reading, ready, writing, free, one character per slot up to 24 characters.
std::string bar(const json& ring) {
    const double slots = ring.value("slots", 0.0);
    if (slots <= 0) return "[]";
    const int width = static_cast<int>(std::min(slots, 24.0));
    const double counts[] = {ring.value("reading", 0.0), ring.value("ready", 0.0), ring.value("writing", 0.0)};
    const char marks[] = {'#', '=', '+'};
    std::string s = "[";
    int used = 0;
    double acc = 0;
    for (int i = 0; i < 3; ++i) {
        acc += counts[i];
        const int upto = static_cast<int>(std::lround(acc / slots * width));
        for (; used < upto; ++used) s += marks[i];
    }
    for (; used < width; ++used) s += '.';
    return s + "]";
}

std::uint64_t trained(const json& ledger) {
    return ledger.value("consumed", std::uint64_t{0}) + ledger.value("durable", std::uint64_t{0});
}

} // namespace

std::string status_line(const json& st) {
    const json& rates = st["rates"];
    const json& ring = st["ring"];
    const json& ledger = st["ledger"];
    std::uint64_t restarts = 0;
    for (const auto& w : st["workers"]) restarts += w.value("restarts", std::uint64_t{0});
    std::string s = fmt::format("target {} tok/s {} smp/s | drafter {} tok/s | ring {} {}R {}r",
                                human(rates["target"].value("tokens_per_s", 0.0)),
                                human(rates["target"].value("samples_per_s", 0.0)),
                                human(rates["drafter"].value("tokens_per_s", 0.0)), bar(ring),
                                ring.value("ready", 0), ring.value("reading", 0));
    const json& d = st["drafter"];
    if (!d["step"].is_null()) s += fmt::format(" | step {} loss {:.4g}", d["step"].get<std::uint64_t>(), d["loss"].get<double>());
    const std::uint64_t total = ledger.value("total", std::uint64_t{0});
    if (total) s += fmt::format(" | {}/{} {:.0f}%", trained(ledger), total, 100.0 * static_cast<double>(trained(ledger)) / static_cast<double>(total));
    if (const auto rejected = ledger.value("rejected", std::uint64_t{0})) s += fmt::format(" | {} rejected", rejected);
    if (st.contains("spec") && st["spec"].is_object())
        s += fmt::format(" | tau {:.2f}@{}", st["spec"].value("tau", 0.0), st["spec"].value("step", std::uint64_t{0}));
    s += fmt::format(" | restarts {}", restarts);
    if (st.contains("balance") && !st["balance"]["targets_wait"].is_null() && !st["balance"]["drafters_wait"].is_null())
        s += fmt::format(" | wait T {:.0f}% D {:.0f}%", 100 * st["balance"]["targets_wait"].get<double>(),
                         100 * st["balance"]["drafters_wait"].get<double>());
    const std::string phase = st["run"].value("phase", "");
    if (phase != "running") s += " | " + phase;
    return s;
}

std::string status_text(const json& st) {
    const json& run = st["run"];
    std::string s = fmt::format("run {} ({}), supervisor pid {}, {} for {}, run dir {}\n", run.value("name", ""),
                                run.value("mode", ""), run.value("pid", 0), run.value("phase", ""),
                                duration(run.value("uptime_s", 0.0)), run.value("run_dir", ""));
    s += fmt::format("  {:<11} {:<8} {:<6} {:>8}  {:<11} {:>8}  {:<22} {}\n", "WORKER", "ROLE", "PLACE", "PID", "STATE",
                     "RESTARTS", "LAST EXIT", "ACTIVITY");
    for (const auto& w : st["workers"]) {
        std::string activity;
        if (w.contains("tokens_per_s")) {
            activity = fmt::format("{} tok/s, {} samples/s, {} samples", human(w.value("tokens_per_s", 0.0)),
                                   human(w.value("samples_per_s", 0.0)), w.value("samples", std::uint64_t{0}));
            if (w.value("state", "") == "suspended") activity = "stopped by a signal (SIGCONT resumes it); " + activity;
            else if (w.value("heartbeat_age_s", 0.0) > kStaleHeartbeatS)
                activity = fmt::format("no heartbeat for {}; ", duration(w.value("heartbeat_age_s", 0.0))) + activity;
            if (w.contains("step")) activity += fmt::format(", step {} loss {:.4g}", w.value("step", std::uint64_t{0}), w.value("loss", 0.0));
        }
        s += fmt::format("  {:<11} {:<8} {:<6} {:>8}  {:<11} {:>8}  {:<22} {}\n", w.value("name", ""), w.value("role", ""),
                         w.value("place", ""), w["pid"].is_null() ? "-" : std::to_string(w["pid"].get<int>()),
                         w.value("state", ""), w.value("restarts", 0),
                         w["last_exit"].is_null() ? "-" : w["last_exit"].get<std::string>(), activity);
    }
    const json& rates = st["rates"];
    s += fmt::format("rates: targets {} tok/s, {} samples/s; drafters {} tok/s, {} samples/s\n",
                     human(rates["target"].value("tokens_per_s", 0.0)), human(rates["target"].value("samples_per_s", 0.0)),
                     human(rates["drafter"].value("tokens_per_s", 0.0)), human(rates["drafter"].value("samples_per_s", 0.0)));
    if (st.contains("balance")) {
        const json& b = st["balance"];
        auto pct = [](const json& v) { return v.is_null() ? std::string("-") : fmt::format("{:.0f}%", 100 * v.get<double>()); };
        s += fmt::format("balance: targets wait {} of their time (a full ring or no samples), drafters wait {} (for "
                         "data){}\n", pct(b["targets_wait"]), pct(b["drafters_wait"]),
                         b.value("advice", "").empty() ? "" : ": " + b.value("advice", ""));
    }
    if (st.contains("gang") && !st["gang"]["reformations"].empty()) {
        // Each gang start (step 0: the first); a resize shows its world size before and after.
        const json& g = st["gang"];
        std::string list;
        for (const auto& r : g["reformations"]) {
            const auto world = r.value("world", 0u);
            const std::string sized = r.contains("world_before") && r["world_before"] != r["world"]
                                          ? fmt::format("{} -> {} ranks", r["world_before"].get<std::uint32_t>(), world)
                                          : fmt::format("{} ranks", world);
            list += fmt::format("{}at step {} ({}{})", list.empty() ? "" : ", ", r.value("step", std::uint64_t{0}), sized,
                                r.contains("since_checkpoint_s")
                                    ? fmt::format(", {} since its checkpoint", duration(r.value("since_checkpoint_s", 0.0)))
                                    : std::string());
        }
        s += fmt::format("gang: {} drafter ranks; formed {} time(s) in this run dir: {}\n", g.value("world", 0u),
                         g.value("reformations_total", std::uint64_t{0}), list);
    }
    if (st.contains("spec") && st["spec"].is_object()) {
        const json& sp = st["spec"];
        s += fmt::format("tau: {:.3f} after step {} ({} prompts, {} verify steps; speculative decoding with the "
                         "target{})\n", sp.value("tau", 0.0), sp.value("step", std::uint64_t{0}),
                         sp.value("prompts", std::uint64_t{0}), sp.value("verify_steps", std::uint64_t{0}),
                         sp.value("final", false) ? ", the export" : "");
    }
    const json& ring = st["ring"];
    const json& c = ring["counters"];
    s += fmt::format("ring {}: {} slots: {} free, {} writing, {} ready, {} reading {}{}\n", ring.value("name", ""),
                     ring.value("slots", 0), ring.value("free", 0), ring.value("writing", 0), ring.value("ready", 0),
                     ring.value("reading", 0), bar(ring), ring.value("stopping", false) ? " (stopping)" : "");
    s += fmt::format("  commits {}, releases {}, aborts {}, put backs {}, reclaimed {} writing / {} reading, "
                     "redeliveries {}\n", c.value("commits", 0), c.value("releases", 0), c.value("aborts", 0),
                     c.value("put_backs", 0), c.value("reclaimed_writing", 0), c.value("reclaimed_reading", 0),
                     c.value("redeliveries", 0));
    if (c.value("peer_lost", 0) > 0)
        s += fmt::format("  {} READY slots lost with their target's GPU (peer transport: their samples produced again)\n",
                         c.value("peer_lost", 0));
    const json& l = st["ledger"];
    const std::uint64_t total = l.value("total", std::uint64_t{0});
    s += fmt::format("ledger {}: {} of {} sample passes trained ({:.1f}%){}: {} pending, {} in slots, {} consumed, "
                     "{} durable, {} rejected (non-finite hidden states: never trained)\n", l.value("name", ""),
                     trained(l), total, total ? 100.0 * static_cast<double>(trained(l)) / static_cast<double>(total) : 0.0,
                     l.value("done", false) ? ", done" : "", l.value("pending", 0), l.value("in_slot", 0),
                     l.value("consumed", 0), l.value("durable", 0), l.value("rejected", 0));
    return s;
}

} // namespace hsring::supervisor
