#pragma once
// Reads one TOML table into typed fields, remembering which keys it consumed so that any other
// key is an "unknown key" error. Every error names FILE:LINE:COL, the [table] key path and what
// is allowed. Only src/config/ includes toml++ (compile time, and one place to change it).
#include "hsring/error.hpp"

#include <toml++/toml.h>

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace hsring::config_detail {

class Section {
public:
    Section(const toml::table* table, std::string name, std::string file, toml::source_region where)
        : table_(table), name_(std::move(name)), file_(std::move(file)), where_(where) {}

    bool present() const { return table_ != nullptr; }
    bool has(const char* key) const { return table_ && table_->contains(key); }

    // Optional keys keep `out` (the default) when absent.
    void integer(const char* key, std::uint64_t& out, std::uint64_t lo, std::uint64_t hi);
    void integer(const char* key, std::uint32_t& out, std::uint32_t lo, std::uint32_t hi);
    void integer(const char* key, std::int64_t& out, std::int64_t lo, std::int64_t hi);
    void number(const char* key, double& out, double lo, double hi);
    void boolean(const char* key, bool& out);
    void string(const char* key, std::string& out, bool allow_empty = true);
    // An integer number of bytes or a string such as "64GiB".
    void bytes(const char* key, std::uint64_t& out, std::uint64_t lo, std::uint64_t hi);
    // One of `choices` (given as name/value pairs).
    template <typename E>
    void choice(const char* key, E& out, const std::vector<std::pair<const char*, E>>& choices);
    void int_list(const char* key, std::vector<int>& out, int lo, int hi);
    // Worker places: GPU indices or "cpu".
    void places(const char* key, std::vector<int>& out);

    // Marks a key required: error if absent.
    void require(const char* key, const char* what);
    // Unknown keys in this table are errors (call after reading every known key).
    void finish() const;

    // "FILE:LINE:COL: [table] key: " for a key's value (or the table when key is absent).
    std::string at(const char* key) const;
    [[noreturn]] void bad(const char* key, const std::string& what) const;

private:
    const toml::node* get(const char* key);
    std::string type_name(const toml::node& n) const;

    const toml::table* table_;
    std::string name_;
    std::string file_;
    toml::source_region where_;
    std::set<std::string, std::less<>> known_;
};

template <typename E>
void Section::choice(const char* key, E& out, const std::vector<std::pair<const char*, E>>& choices) {
    const toml::node* n = get(key);
    if (!n) return;
    std::string allowed;
    for (const auto& [name, _] : choices) allowed += (allowed.empty() ? "\"" : ", \"") + std::string(name) + "\"";
    auto s = n->value<std::string>();
    if (!s) bad(key, "expected one of " + allowed + ", got " + type_name(*n));
    for (const auto& [name, value] : choices) {
        if (*s == name) {
            out = value;
            return;
        }
    }
    bad(key, "\"" + *s + "\" is not allowed: use one of " + allowed);
}

} // namespace hsring::config_detail
