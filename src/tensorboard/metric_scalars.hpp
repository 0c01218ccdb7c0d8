#pragma once
// metrics.jsonl's rows as TensorBoard scalars: every number of a row under a tag that says what it
// is, so that TensorBoard shows what bin/plot-run shows.
//
//   step row    {"step": 12, "loss": 3.1, "acc": [..], "ring": {"free": 2, ..}, ..}
//               -> train/loss, train/acc/1.., train/ring/free, .. at step 12
//   evaluation  {"step": 12, "eval": {"loss": .., "acc": [..], ..}}  -> eval/loss, eval/acc/1..
//   tau         {"step": 12, "spec": {"tau": .., "acceptance_per_position": [..], ..}}  -> spec/tau, ..
//   resume      {"resume": {"step": 10, ..}}  -> a restart at step 11 (later steps seen before
//               are dropped: they were rolled back)
// Arrays count from 1 (acc/1 is the first drafted position). null is NaN (a non-finite value
// that JSON cannot hold); booleans and strings are not scalars and are left out, as are the
// row's step and the bookkeeping keys (time, incarnation, world).
#include "tensorboard/event_writer.hpp"

#include <nlohmann/json.hpp>

#include <optional>

namespace hsring::tensorboard {

struct MetricRow {
    std::int64_t step = 0;
    std::vector<Scalar> scalars;
    std::optional<std::int64_t> restart_at;  // a resume row: the first step trained after it
};

// What `row` means to TensorBoard; nullopt for a row it has nothing for.
std::optional<MetricRow> metric_row(const nlohmann::json& row);

// metric_row() of every line appended, written to an event file.
class MetricsMirror {
public:
    explicit MetricsMirror(const std::filesystem::path& dir) : writer_(dir) {}
    void append(const nlohmann::json& row);
    const std::filesystem::path& path() const { return writer_.path(); }

private:
    EventWriter writer_;
};

} // namespace hsring::tensorboard
