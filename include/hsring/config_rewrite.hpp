#pragma once
// A copy of a config file with some keys set, as TOML text: `hsring drill` runs a user's config
// from its own work dir with a few keys of its own. Relative paths of the original ([data] path
// and eval_path, [target] model, [drafter] init) are made absolute, so the copy, wherever it is
// written, names the same files. Only src/config/ reads TOML.
#include <cstdint>
#include <filesystem>
#include <string>
#include <variant>
#include <vector>

namespace hsring {

struct ConfigSetting {
    std::string table, key;
    std::variant<std::string, std::int64_t, double, bool, std::vector<std::string>> value;  // a list: of strings
};

// Throws hsring::Error naming the file (unreadable, not valid TOML).
std::string rewrite_config(const std::filesystem::path& file, const std::vector<ConfigSetting>& settings);

} // namespace hsring
