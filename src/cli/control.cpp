// The control commands: hsring status [--json] | restart WORKER | kill WORKER | stop [--now].
// They talk to the supervisor over RUN_DIR/control.sock (src/supervisor/control_client.hpp).
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "supervisor/control_client.hpp"
#include "supervisor/status.hpp"

#include <fmt/format.h>

#include <string>

namespace hsring::cli {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr const char* kWhere =
    "  --run-dir DIR    the run's directory (default: the run dir of --config FILE, else the current directory)\n"
    "  --config FILE    find the run directory from this config\n";

struct Parsed {
    ParsedArgs args;
    std::filesystem::path run_dir;
};

// Parses and resolves the run directory; nullopt after printing usage.
std::optional<Parsed> parse(Args args, const char* usage, std::size_t positional, const std::set<std::string>& flags) {
    Parsed p;
    std::set<std::string> all_flags = flags;
    all_flags.insert("--help");
    try {
        p.args = parse_args(args.subspan(1), {"--run-dir", "--config"}, all_flags);
    } catch (const UsageError& e) {
        fmt::print(stderr, "hsring {}: {}\n{}{}", args[0], e.message, usage, kWhere);
        return std::nullopt;
    }
    if (p.args.flag("--help") || p.args.positional.size() != positional) {
        fmt::print(p.args.flag("--help") ? stdout : stderr, "{}{}", usage, kWhere);
        return std::nullopt;
    }
    p.run_dir = supervisor::control_run_dir(p.args.value("--run-dir"), p.args.value("--config"));
    return p;
}

int usage_exit(Args args) {
    for (char* a : args)
        if (std::string_view(a) == "--help") return 0;
    return 2;
}

} // namespace

int status(Args args) {
    auto p = parse(args, "usage: hsring status [--json] [--run-dir DIR | --config FILE]\n", 0, {"--json"});
    if (!p) return usage_exit(args);
    supervisor::ControlClient client(p->run_dir);
    const json reply = client.request({{"cmd", "status"}}, 10s);
    if (p->args.flag("--json")) fmt::print("{}\n", reply["status"].dump(2));
    else fmt::print("{}", supervisor::status_text(reply["status"]));
    return 0;
}

int restart_or_kill(Args args) {
    const std::string cmd = args[0];
    const std::string usage = fmt::format("usage: hsring {} WORKER [--run-dir DIR | --config FILE]\n"
                                          "  WORKER: target.0, target.1, ..., drafter.0 (hsring status lists them)\n", cmd);
    auto p = parse(args, usage.c_str(), 1, {});
    if (!p) return usage_exit(args);
    supervisor::ControlClient client(p->run_dir);
    const json reply = client.request({{"cmd", cmd}, {"worker", p->args.positional[0]}}, 10s);
    fmt::print("{}\n", reply.value("message", "done"));
    return 0;
}

int stop(Args args) {
    auto p = parse(args,
                   "usage: hsring stop [--now] [--no-wait] [--run-dir DIR | --config FILE]\n"
                   "  graceful: targets stop claiming, the drafter drains the ring and checkpoints, the ring and\n"
                   "  ledger are removed (unless [run] keep_ring); waits for the supervisor to exit\n"
                   "  --now      SIGKILL every worker at once; the ring and ledger are kept\n"
                   "  --no-wait  return once the supervisor has the request\n",
                   0, {"--now", "--no-wait"});
    if (!p) return usage_exit(args);
    const bool wait = !p->args.flag("--no-wait");
    supervisor::ControlClient client(p->run_dir);
    const json reply = client.request({{"cmd", "stop"}, {"now", p->args.flag("--now")}, {"wait", wait}}, 10s);
    fmt::print("{}\n", reply.value("message", "stopping"));
    if (!wait) return 0;
    fmt::print("waiting for the run to end (Ctrl-C stops waiting, not the stop)\n");
    std::fflush(stdout);
    auto done = client.next(std::nullopt);
    if (!done || !done->value("done", false)) {
        fmt::print(stderr, "hsring stop: the supervisor closed the connection without a final report (did it die?)\n");
        return 1;
    }
    fmt::print("{}\nsupervisor exit code {}\n", done->value("summary", ""), done->value("exit_code", -1));
    return 0;
}

} // namespace hsring::cli
