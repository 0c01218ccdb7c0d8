// A copy of a config with some keys set (see hsring/config_rewrite.hpp).
#include "hsring/config_rewrite.hpp"

#include "hsring/error.hpp"
#include "config/toml_section.hpp"

#include <sstream>
#include <type_traits>

namespace hsring {

std::string rewrite_config(const std::filesystem::path& file, const std::vector<ConfigSetting>& settings) {
    toml::table root;
    try {
        root = toml::parse_file(file.string());
    } catch (const toml::parse_error& e) {
        const auto& b = e.source().begin;
        fail("{}:{}:{}: not valid TOML: {}", file.string(), b.line, b.column, e.description());
    }
    const std::filesystem::path base = std::filesystem::absolute(file).parent_path();
    // Paths relative to the config's directory, as Config::resolve reads them.
    for (auto [table, key] : {std::pair{"data", "path"}, {"data", "eval_path"}, {"target", "model"}, {"drafter", "init"}}) {
        toml::table* t = root[table].as_table();
        if (!t) continue;
        const auto* v = t->get_as<std::string>(key);
        if (!v) continue;
        const std::string s = v->get();
        if (s.empty() || s.rfind("preset:", 0) == 0 || std::filesystem::path(s).is_absolute()) continue;
        t->insert_or_assign(key, (base / s).lexically_normal().string());
    }
    for (const ConfigSetting& s : settings) {
        if (!root.contains(s.table)) root.insert(s.table, toml::table{});
        toml::table* t = root[s.table].as_table();
        if (!t) fail("{}: [{}] is not a table", file.string(), s.table);
        std::visit(
            [&](const auto& v) {
                if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::vector<std::string>>) {
                    toml::array a;
                    for (const auto& x : v) a.push_back(x);
                    t->insert_or_assign(s.key, std::move(a));
                } else {
                    t->insert_or_assign(s.key, v);
                }
            },
            s.value);
    }
    std::ostringstream out;
    out << "# written by hsring from " << std::filesystem::absolute(file).string() << "\n" << root << "\n";
    return out.str();
}

} // namespace hsring
