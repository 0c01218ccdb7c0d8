#include "worker/checkpoint_writer.hpp"

#include "hsring/error.hpp"

#include <utility>

namespace hsring::worker {

CheckpointWriter::~CheckpointWriter() {
    if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::start(std::uint64_t step, std::function<void()> job) {
    HSRING_ASSERT(!thread_.joinable() && step_ == 0);
    step_ = step;
    error_ = nullptr;
    done_.store(false, std::memory_order_relaxed);
    thread_ = std::thread([this, job = std::move(job)] {
        try {
            job();
        } catch (...) {
            error_ = std::current_exception();
        }
        done_.store(true, std::memory_order_release);  // publishes error_
    });
}

std::uint64_t CheckpointWriter::wait() {
    if (!thread_.joinable()) return 0;
    thread_.join();
    const std::uint64_t s = step_;
    step_ = 0;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return s;
}

} // namespace hsring::worker
