#pragma once
// A TensorBoard event file under a run's tensorboard/ directory: scalars per step, and the
// restarts that make TensorBoard forget steps a resumed drafter trains again.
//
//   RUN_DIR/tensorboard/events.out.tfevents.<unix seconds>.<microseconds>.<host>.<pid>.hsring
//
// Each process that logs opens a file of its own (TensorBoard reads every file of a directory in
// the order of their names, so a restarted drafter's file follows its predecessor's). Records
// are TFRecords of the Event messages in event.proto (record_writer.hpp).
#include "tensorboard/record_writer.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace hsring::tensorboard {

struct Scalar {
    std::string tag;
    double value;  // NaN and inf are kept: TensorBoard shows them
};

class EventWriter {
public:
    // Creates `dir` if missing and a new event file in it (its first record: the file version).
    explicit EventWriter(const std::filesystem::path& dir);

    // One event at `step` holding every scalar (nothing when `scalars` is empty).
    void scalars(std::int64_t step, const std::vector<Scalar>& scalars);
    // A (re)start whose first step is `first_step`: TensorBoard drops the events of steps
    // >= first_step that came before this record (SessionLog START, purge of orphaned data).
    void restart(std::int64_t first_step);

    const std::filesystem::path& path() const { return records_.path(); }

private:
    RecordWriter records_;
};

// The file name for a new event file made now by this process.
std::string event_file_name();

} // namespace hsring::tensorboard
