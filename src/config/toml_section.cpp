#include "config/toml_section.hpp"

#include "hsring/units.hpp"

#include <fmt/format.h>

#include <limits>

namespace hsring::config_detail {

std::string Section::at(const char* key) const {
    toml::source_region r = where_;
    if (table_ && key) {
        if (const toml::node* n = table_->get(key)) r = n->source();
    }
    std::string head = r.begin.line ? fmt::format("{}:{}:{}", file_, r.begin.line, r.begin.column) : file_;
    return key ? fmt::format("{}: [{}] {}", head, name_, key) : fmt::format("{}: [{}]", head, name_);
}

void Section::bad(const char* key, const std::string& what) const { fail("{}: {}", at(key), what); }

const toml::node* Section::get(const char* key) {
    known_.insert(key);
    return table_ ? table_->get(key) : nullptr;
}

std::string Section::type_name(const toml::node& n) const {
    switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
    }
}

namespace {
template <typename T>
void read_int(Section& s, const toml::node* n, const char* key, T& out, T lo, T hi, const std::string& tname) {
    if (!n) return;
    auto v = n->value_exact<std::int64_t>();
    if (!v) s.bad(key, fmt::format("expected an integer in {}..{}, got {}", lo, hi, tname));
    // long double holds every int64 and uint64 exactly (x86-64: 64-bit mantissa).
    const long double x = static_cast<long double>(*v);
    if (x < static_cast<long double>(lo) || x > static_cast<long double>(hi))
        s.bad(key, fmt::format("{} is out of range: allowed {}..{}", *v, lo, hi));
    out = static_cast<T>(*v);
}
} // namespace

void Section::integer(const char* key, std::uint64_t& out, std::uint64_t lo, std::uint64_t hi) {
    const toml::node* n = get(key);
    read_int(*this, n, key, out, lo, hi, n ? type_name(*n) : "");
}
void Section::integer(const char* key, std::uint32_t& out, std::uint32_t lo, std::uint32_t hi) {
    const toml::node* n = get(key);
    read_int(*this, n, key, out, lo, hi, n ? type_name(*n) : "");
}
void Section::integer(const char* key, std::int64_t& out, std::int64_t lo, std::int64_t hi) {
    const toml::node* n = get(key);
    read_int(*this, n, key, out, lo, hi, n ? type_name(*n) : "");
}

void Section::number(const char* key, double& out, double lo, double hi) {
    const toml::node* n = get(key);
    if (!n) return;
    std::optional<double> v;
    if (n->is_floating_point()) v = n->as_floating_point()->get();
    else if (n->is_integer()) v = static_cast<double>(n->as_integer()->get());
    if (!v) bad(key, fmt::format("expected a number in {}..{}, got {}", lo, hi, type_name(*n)));
    if (!(*v >= lo && *v <= hi)) bad(key, fmt::format("{} is out of range: allowed {}..{}", *v, lo, hi));
    out = *v;
}

void Section::boolean(const char* key, bool& out) {
    const toml::node* n = get(key);
    if (!n) return;
    auto v = n->value_exact<bool>();
    if (!v) bad(key, "expected true or false, got " + type_name(*n));
    out = *v;
}

void Section::string(const char* key, std::string& out, bool allow_empty) {
    const toml::node* n = get(key);
    if (!n) return;
    auto v = n->value_exact<std::string>();
    if (!v) bad(key, "expected a string, got " + type_name(*n));
    if (!allow_empty && v->empty()) bad(key, "must not be empty");
    out = *v;
}

void Section::bytes(const char* key, std::uint64_t& out, std::uint64_t lo, std::uint64_t hi) {
    const toml::node* n = get(key);
    if (!n) return;
    std::optional<std::uint64_t> v;
    if (auto i = n->value_exact<std::int64_t>()) {
        if (*i < 0) bad(key, fmt::format("{} is negative: give a size such as \"8GiB\" or a byte count", *i));
        v = static_cast<std::uint64_t>(*i);
    } else if (auto s = n->value_exact<std::string>()) {
        v = parse_bytes(*s);
        if (!v) bad(key, fmt::format("\"{}\" is not a size: write e.g. \"64GiB\", \"512MiB\" or a byte count", *s));
    } else {
        bad(key, "expected a size (\"64GiB\" or a byte count), got " + type_name(*n));
    }
    if (*v < lo || *v > hi)
        bad(key, fmt::format("{} is out of range: allowed {}..{}", format_bytes(*v), format_bytes(lo), format_bytes(hi)));
    out = *v;
}

void Section::int_list(const char* key, std::vector<int>& out, int lo, int hi) {
    const toml::node* n = get(key);
    if (!n) return;
    const toml::array* a = n->as_array();
    if (!a) bad(key, "expected an array of integers, got " + type_name(*n));
    std::vector<int> v;
    for (const auto& e : *a) {
        auto i = e.value_exact<std::int64_t>();
        if (!i) bad(key, "expected an array of integers, found " + type_name(e));
        if (*i < lo || *i > hi) bad(key, fmt::format("{} is out of range: allowed {}..{}", *i, lo, hi));
        v.push_back(static_cast<int>(*i));
    }
    out = std::move(v);
}

void Section::places(const char* key, std::vector<int>& out) {
    const toml::node* n = get(key);
    if (!n) return;
    const toml::array* a = n->as_array();
    if (!a) bad(key, "expected an array of GPU indices or \"cpu\" entries, e.g. [0, 1] or [\"cpu\"]");
    std::vector<int> v;
    for (const auto& e : *a) {
        if (auto i = e.value_exact<std::int64_t>()) {
            if (*i < 0 || *i > 1023) bad(key, fmt::format("GPU index {} is out of range 0..1023", *i));
            v.push_back(static_cast<int>(*i));
        } else if (auto s = e.value_exact<std::string>(); s && *s == "cpu") {
            v.push_back(-1);
        } else {
            bad(key, "entries must be GPU indices or \"cpu\", found " + type_name(e));
        }
    }
    out = std::move(v);
}

void Section::require(const char* key, const char* what) {
    known_.insert(key);
    if (!table_ || !table_->contains(key)) {
        std::string head = where_.begin.line ? fmt::format("{}:{}", file_, where_.begin.line) : file_;
        fail("{}: [{}] {} is required: {}", head, name_, key, what);
    }
}

void Section::finish() const {
    if (!table_) return;
    for (auto&& [k, v] : *table_) {
        if (known_.count(k.str())) continue;
        std::string allowed;
        for (const auto& name : known_) allowed += (allowed.empty() ? "" : ", ") + name;
        const auto& r = k.source();
        fail("{}:{}:{}: unknown key [{}] {} (allowed keys: {}; see config/reference.toml)", file_,
             r.begin.line, r.begin.column, name_, k.str(), allowed);
    }
}

} // namespace hsring::config_detail
