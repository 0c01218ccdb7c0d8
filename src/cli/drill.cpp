// hsring drill CONFIG [--faults N] [--seed S] ...: faults against a real run, then verified
// (src/drill/drill.hpp).
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "drill/drill.hpp"
#include "hsring/error.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

namespace hsring::cli {

namespace {

double number(const std::string& option, const std::string& text, double lo) {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end || !(v >= lo)) fail("{} {}: expected a number >= {}", option, text, lo);
    return v;
}

} // namespace

int drill(Args args) {
    constexpr const char* kUsage =
        "usage: hsring drill CONFIG.toml [--faults N] [--seed S] [--mode synthetic|train] [--samples N]\n"
        "                    [--work-dir DIR] [--keep] [--step-ms MS] [--gap-ms MS] [--timeout S] [--stall-s S]\n"
        "                    [--resize]\n"
        "  runs CONFIG's pipeline (synthetic mode: no models) as real `hsring run` processes while it SIGKILLs and\n"
        "  SIGSTOPs random workers and the supervisor, restarts workers and injects faults (HSRING_FAULT), run\n"
        "  after run until N faults (default 200) were dealt; then verifies every run dir as `hsring ledger\n"
        "  verify` does and prints the faults survived and the samples lost and doubled. Exit 0 when every run\n"
        "  completed and verified, 1 when not (its files stay in the work dir), 2 on a usage or config error.\n"
        "  --mode train    the config's real models (a GPU machine)     --samples N  first N samples (1000; 0 all)\n"
        "  --work-dir DIR  default $TMPDIR/hsring-drill-PID             --keep       keep the work dir\n"
        "  --step-ms MS    synthetic compute per drafter batch (5)      --gap-ms MS  mean time between faults (250)\n"
        "  --timeout S     one run at most (900)                         --stall-s S  no progress = a hang (120)\n"
        "  --resize        each supervisor start draws 1..3 drafter ranks (a step of 6 slots; synthetic mode)\n";
    ParsedArgs p;
    try {
        p = parse_args(args.subspan(1),
                       {"--faults", "--seed", "--mode", "--samples", "--work-dir", "--step-ms", "--gap-ms", "--timeout",
                        "--stall-s"},
                       {"--keep", "--resize", "--help"});
    } catch (const UsageError& e) {
        fmt::print(stderr, "hsring drill: {}\n{}", e.message, kUsage);
        return 2;
    }
    if (p.flag("--help")) {
        fmt::print("{}", kUsage);
        return 0;
    }
    if (p.positional.size() != 1) {
        fmt::print(stderr, "{}", kUsage);
        return 2;
    }
    drill::DrillOptions o;
    o.config = p.positional[0];
    if (auto v = p.value("--faults")) o.faults = static_cast<std::uint32_t>(number("--faults", *v, 1));
    if (auto v = p.value("--seed")) o.seed = static_cast<std::uint64_t>(number("--seed", *v, 0));
    if (auto v = p.value("--mode")) {
        if (*v != "synthetic" && *v != "train") fail("--mode {}: expected synthetic or train", *v);
        o.train = *v == "train";
    }
    if (auto v = p.value("--samples")) o.samples = static_cast<std::uint64_t>(number("--samples", *v, 0));
    if (auto v = p.value("--work-dir")) o.work_dir = *v;
    if (auto v = p.value("--step-ms")) o.step_ms = number("--step-ms", *v, 0);
    if (auto v = p.value("--gap-ms")) o.gap_ms = number("--gap-ms", *v, 1);
    if (auto v = p.value("--timeout")) o.timeout_s = number("--timeout", *v, 1);
    if (auto v = p.value("--stall-s")) o.stall_s = number("--stall-s", *v, 1);
    o.keep = p.flag("--keep");
    o.resize = p.flag("--resize");
    return drill::run_drill(o);
}

} // namespace hsring::cli
