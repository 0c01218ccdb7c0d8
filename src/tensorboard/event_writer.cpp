// TensorBoard event files (see event_writer.hpp); the messages are protobuf's (event.proto).
#include "tensorboard/event_writer.hpp"

#include "hsring/wall_clock.hpp"

#include "event.pb.h"  // protoc's, in this folder of the build dir

#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <system_error>

namespace hsring::tensorboard {
namespace {

std::string hostname() {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
    return buf;
}

} // namespace

std::string event_file_name() {
    // TensorBoard reads a directory's files in name order: seconds and then microseconds, fixed
    // width, so a restarted drafter's file (its restart, then the steps after it) comes after its
    // predecessor's even within the same second.
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
    return fmt::format("events.out.tfevents.{:010d}.{:06d}.{}.{}.hsring", us / 1000000, us % 1000000, hostname(),
                       ::getpid());
}

EventWriter::EventWriter(const std::filesystem::path& dir)
    : records_((std::filesystem::create_directories(dir), dir / event_file_name())) {
    Event e;
    e.set_wall_time(unix_seconds());
    e.set_file_version("brain.Event:2");
    records_.write(e.SerializeAsString());
}

void EventWriter::scalars(std::int64_t step, const std::vector<Scalar>& scalars) {
    if (scalars.empty()) return;
    Event e;
    e.set_wall_time(unix_seconds());
    e.set_step(step);
    Summary* s = e.mutable_summary();
    for (const Scalar& x : scalars) {
        Summary::Value* v = s->add_value();
        v->set_tag(x.tag);
        v->set_simple_value(static_cast<float>(x.value));
    }
    records_.write(e.SerializeAsString());
}

void EventWriter::restart(std::int64_t first_step) {
    Event e;
    e.set_wall_time(unix_seconds());
    e.set_step(first_step);
    e.mutable_session_log()->set_status(SessionLog::START);
    records_.write(e.SerializeAsString());
}

} // namespace hsring::tensorboard
