#include "worker/core/checkpoint_writer.hpp"

#include "hsring/error.hpp"

#include <utility>

namespace hsring::worker {

CheckpointWriter::~CheckpointWriter() {
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::start(std::uint64_t step, std::function<void()> job) {
    {
        std::lock_guard lock(mu_);
        HSRING_ASSERT(jobs_.size() < kMaxInFlight && (jobs_.empty() || jobs_.back().step < step),
                      "checkpoint writer: {} writes in flight, step {}", jobs_.size(), step);
        jobs_.push_back(Job{step, std::move(job)});
    }
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    cv_.notify_all();
}

void CheckpointWriter::loop() {
    std::unique_lock lock(mu_);
    for (;;) {
        // The oldest job not yet done (jobs run in order; done ones wait to be collected).
        Job* next = nullptr;
        for (Job& j : jobs_)
            if (!j.done) {
                next = &j;
                break;
            }
        if (stopping_) return;
        if (!next) {
            cv_.wait(lock);
            continue;
        }
        // The deque is only appended to (and popped at done jobs) while the lock is released:
        // `next` stays valid (std::deque keeps references across push_back and pop_front of others).
        std::function<void()> run = std::move(next->run);
        lock.unlock();
        std::exception_ptr error;
        try {
            run();
        } catch (...) {
            error = std::current_exception();
        }
        run = nullptr;  // releases the job's captures (its host buffer) before it counts as done
        lock.lock();
        next->error = error;
        next->done = true;
        cv_.notify_all();
    }
}

std::uint64_t CheckpointWriter::pop_done(std::unique_lock<std::mutex>& lock) {
    (void)lock;
    std::uint64_t step = 0;
    while (!jobs_.empty() && jobs_.front().done) {
        Job j = std::move(jobs_.front());
        jobs_.pop_front();
        if (j.error) std::rethrow_exception(j.error);
        step = j.step;
    }
    return step;
}

std::uint64_t CheckpointWriter::collect() {
    std::unique_lock lock(mu_);
    return pop_done(lock);
}

std::uint64_t CheckpointWriter::wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] {
        for (const Job& j : jobs_)
            if (!j.done) return false;
        return true;
    });
    return pop_done(lock);
}

} // namespace hsring::worker
