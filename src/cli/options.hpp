#pragma once
// A small argv parser for the subcommands: "--name VALUE" / "--name=VALUE" options, "--flag"
// switches and positional arguments. Anything unknown is a usage error naming it.
#include "cli/commands.hpp"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace hsring::cli {

struct ParsedArgs {
    std::vector<std::string> positional;
    std::map<std::string, std::string> values;
    std::set<std::string> flags;

    std::optional<std::string> value(const std::string& name) const;
    bool flag(const std::string& name) const { return flags.count(name) > 0; }
};

// `args` excludes the command's own name(s). Throws UsageError.
ParsedArgs parse_args(std::span<char*> args, const std::set<std::string>& value_options,
                      const std::set<std::string>& flag_options);

struct UsageError {
    std::string message;
};

} // namespace hsring::cli
