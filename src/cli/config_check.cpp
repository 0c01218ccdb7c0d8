// hsring config check FILE: parse, validate against the model shape and the data files' presence,
// print the derived sizes.
#include "cli/commands.hpp"
#include "hsring/config.hpp"
#include "hsring/error.hpp"

#include <fmt/format.h>

#include <string>

namespace hsring::cli {

int config_check(Args args) {
    if (args.size() != 3 || std::string_view(args[1]) != "check") {
        fmt::print(stderr, "usage: hsring config check FILE.toml\n");
        return 2;
    }
    Config cfg = load_config(args[2]);
    apply_launcher_overrides(cfg);  // what `hsring run` on this machine would use
    Derived d = derive(cfg);
    check_data_files(cfg);  // what `hsring run` reads first: a missing file is a config error here too
    fmt::print("{}", describe(cfg, d));
    return 0;
}

} // namespace hsring::cli
