// Subcommand argument parsing (see options.hpp).
#include "cli/options.hpp"

#include <string_view>

namespace hsring::cli {

std::optional<std::string> ParsedArgs::value(const std::string& name) const {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
}

ParsedArgs parse_args(std::span<char*> args, const std::set<std::string>& value_options,
                      const std::set<std::string>& flag_options) {
    ParsedArgs p;
    for (std::size_t i = 0; i < args.size(); ++i) {
        std::string a = args[i];
        if (a.size() < 2 || a.rfind("--", 0) != 0) {
            p.positional.push_back(a);
            continue;
        }
        std::string name = a, value;
        bool has_value = false;
        if (auto eq = a.find('='); eq != std::string::npos) {
            name = a.substr(0, eq);
            value = a.substr(eq + 1);
            has_value = true;
        }
        if (value_options.count(name)) {
            if (!has_value) {
                if (i + 1 >= args.size()) throw UsageError{name + " needs a value"};
                value = args[++i];
            }
            p.values[name] = value;
        } else if (flag_options.count(name) && !has_value) {
            p.flags.insert(name);
        } else {
            throw UsageError{"unknown option " + a};
        }
    }
    return p;
}

} // namespace hsring::cli
