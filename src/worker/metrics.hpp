#pragma once
// RUN_DIR/metrics.jsonl: one JSON object per line, appended by the drafter per logged step
// (loss, per-position accuracy, acceptance estimate, rates, waits, ring occupancy, memory).
// A person plots it with bin/plot-run; the supervisor's status line reads the live counters
// in the ledger instead.
#include "hsring/acceptance.hpp"  // expected_accept_length (was here; the model tools use it too)

#include <filesystem>
#include <string>

namespace hsring::worker {

class MetricsFile {
public:
    explicit MetricsFile(const std::filesystem::path& file);
    ~MetricsFile();
    // Appends one line (a JSON object without the newline); one write(2), so a reader never sees
    // half a line.
    void append(const std::string& json_object);

private:
    int fd_ = -1;
};

} // namespace hsring::worker
