#pragma once
// RUN_DIR/metrics.jsonl: one JSON object per line, appended by the drafter per logged step
// (loss, per-position accuracy, acceptance estimate, rates, waits, ring occupancy, memory), by
// target.0 per tau measurement during training and by the supervisor for the final one. Every
// writer appends whole lines with one write(2) on an O_APPEND descriptor, so lines never mix.
// A person plots it with bin/plot-run, or opens RUN_DIR/tensorboard in TensorBoard: every row is
// mirrored there as scalars (src/tensorboard/metric_scalars.hpp) when hsring was built with
// TensorBoard support. The supervisor's status line reads the live counters in the ledger instead.
#include "hsring/acceptance.hpp"  // expected_accept_length (was here; the model tools use it too)

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>

namespace hsring::tensorboard {
class MetricsMirror;
}

namespace hsring {

class MetricsFile {
public:
    // `tensorboard_dir` empty: metrics.jsonl only.
    explicit MetricsFile(const std::filesystem::path& file, const std::filesystem::path& tensorboard_dir = {});
    ~MetricsFile();
    // Appends `row` as one line; one write(2), so a reader never sees half a line (a short write
    // means a full disk: a UserError naming ENOSPC, since a restart cannot free space). The
    // TensorBoard mirror gets the same row; a mirror that fails (a full disk) warns once and
    // stops: metrics.jsonl is the record, the events are a view of it.
    void append(const nlohmann::json& row);

private:
    int fd_ = -1;
    std::unique_ptr<tensorboard::MetricsMirror> mirror_;
};

// Whether this build writes TensorBoard event files.
bool tensorboard_built();

} // namespace hsring
