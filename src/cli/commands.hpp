#pragma once
// `hsring SUBCOMMAND ...`: each subcommand is a function taking its own argv (argv[0] = its name)
// and returning the process exit code. hsring::Error escaping a command prints "hsring: MESSAGE"
// and exits 2.
#include <span>
#include <string_view>

namespace hsring::cli {

using Args = std::span<char*>;

int config_check(Args args);

} // namespace hsring::cli
