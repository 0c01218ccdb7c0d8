// metrics.jsonl rows -> TensorBoard scalars (see metric_scalars.hpp).
#include "tensorboard/metric_scalars.hpp"

#include <fmt/format.h>

#include <array>
#include <limits>
#include <string_view>

namespace hsring::tensorboard {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, 5> kNotScalars = {"step", "time", "unix_time", "incarnation", "world"};

void flatten(const std::string& tag, const json& v, std::vector<Scalar>& out) {
    if (v.is_number()) {
        out.push_back({tag, v.get<double>()});
    } else if (v.is_null()) {
        out.push_back({tag, std::numeric_limits<double>::quiet_NaN()});
    } else if (v.is_array()) {
        for (std::size_t i = 0; i < v.size(); ++i) flatten(fmt::format("{}/{}", tag, i + 1), v[i], out);
    } else if (v.is_object()) {
        for (const auto& [k, x] : v.items()) flatten(tag + "/" + k, x, out);
    }  // booleans and strings: not scalars
}

} // namespace

std::optional<MetricRow> metric_row(const json& row) {
    if (!row.is_object()) return std::nullopt;
    MetricRow r;
    if (const auto res = row.find("resume"); res != row.end() && res->is_object()) {
        const auto s = res->find("step");
        if (s == res->end() || !s->is_number_integer()) return std::nullopt;
        r.step = s->get<std::int64_t>() + 1;
        r.restart_at = r.step;
        return r;
    }
    const auto step = row.find("step");
    if (step == row.end() || !step->is_number_integer()) return std::nullopt;
    r.step = step->get<std::int64_t>();
    if (const auto ev = row.find("eval"); ev != row.end()) {
        flatten("eval", *ev, r.scalars);
        return r;
    }
    if (const auto sp = row.find("spec"); sp != row.end()) {  // tau with the real target
        flatten("spec", *sp, r.scalars);
        return r;
    }
    // The gang's size over the steps: a re-formation at another world size shows as a step.
    if (const auto w = row.find("world"); w != row.end() && w->is_number()) r.scalars.push_back({"gang/world_size", w->get<double>()});
    for (const auto& [k, v] : row.items()) {
        bool skip = false;
        for (std::string_view n : kNotScalars) skip = skip || k == n;
        if (!skip) flatten("train/" + k, v, r.scalars);
    }
    return r;
}

void MetricsMirror::append(const json& row) {
    const auto r = metric_row(row);
    if (!r) return;
    if (r->restart_at) writer_.restart(*r->restart_at);
    else writer_.scalars(r->step, r->scalars);
}

} // namespace hsring::tensorboard
