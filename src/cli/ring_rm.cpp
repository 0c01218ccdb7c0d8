// hsring ring rm NAME [--force]: remove a run's ring, its ledger, its status board and its held-out
// evaluation board (after a crash, or to start over). Refused while a live process uses the ring (its creator or a process in
// its owner table, checked with their start times), unless --force.
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "hsring/error.hpp"
#include "hsring/eval_board.hpp"
#include "hsring/ledger.hpp"
#include "hsring/ring.hpp"
#include "hsring/status_board.hpp"
#include "supervisor/run_memory.hpp"

#include <fmt/format.h>

namespace hsring::cli {

int ring(Args args) {
    constexpr const char* kUsage =
        "usage: hsring ring rm NAME [--force]\n"
        "  removes the shared-memory ring NAME, its ledger NAME-ledger, its status board NAME-status and its\n"
        "  evaluation board NAME-eval;\n"
        "  refused while a live process uses it (stop its run with hsring stop), unless --force\n";
    ParsedArgs p;
    try {
        p = parse_args(args.subspan(1), {}, {"--force", "--help"});
    } catch (const UsageError& e) {
        fmt::print(stderr, "hsring ring: {}\n{}", e.message, kUsage);
        return 2;
    }
    if (p.flag("--help")) {
        fmt::print("{}", kUsage);
        return 0;
    }
    if (p.positional.size() != 2 || p.positional[0] != "rm") {
        fmt::print(stderr, "{}", kUsage);
        return 2;
    }
    const std::string name = p.positional[1];
    const std::string ledger = Ledger::name_for_ring(name);
    const std::string status = StatusBoard::name_for_ring(name);
    const std::string eval = EvalBoard::name_for_ring(name);
    const bool force = p.flag("--force");
    const bool has_ring = Ring::exists(name);
    if (!has_ring && !Ledger::exists(ledger) && !StatusBoard::exists(status) && !EvalBoard::exists(eval))
        fail("no ring '{}', no ledger '{}', no status board '{}' and no evaluation board '{}' to remove", name, ledger,
             status, eval);
    if (has_ring && !force) {
        Ring ring = [&] {
            try {
                return Ring::attach(name);
            } catch (const Error& e) {
                fail("{}\n  (hsring ring rm {} --force removes it anyway)", e.what(), name);
            }
        }();
        // Creator and owners are checked with their start times: a reused pid is not a user.
        if (const auto users = ring.live_users(); !users.empty()) {
            std::string list;
            for (const auto& u : users) list += fmt::format("{}{} (pid {})", list.empty() ? "" : ", ", u.name, u.owner.pid);
            const std::string dir = ring.tag().run_dir;
            fail("ring '{}' is still running: live processes use it: {}; it belongs to the run in {}. Stop that run "
                 "first (hsring stop --run-dir {}), or pass --force to remove it anyway (its processes keep their "
                 "mappings until they exit)", name, list, dir.empty() ? "?" : dir, dir.empty() ? "DIR" : dir);
        }
    }
    // The same removal as `hsring run --fresh`: every region beside the ring goes with it (the
    // evaluation board <NAME>-eval was left behind when this listed its own).
    fmt::print("removed {}\n", supervisor::remove_run_memory(name));
    return 0;
}

} // namespace hsring::cli
