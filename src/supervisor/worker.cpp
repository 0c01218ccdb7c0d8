// Worker bookkeeping and output (see worker.hpp).
#include "supervisor/worker.hpp"

#include "hsring/error.hpp"
#include "hsring/safe_file.hpp"
#include "supervisor/console.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace hsring::supervisor {

const char* to_string(WorkerState s) {
    switch (s) {
    case WorkerState::Starting: return "starting";
    case WorkerState::Running: return "running";
    case WorkerState::Restarting: return "restarting";
    case WorkerState::Stopping: return "stopping";
    case WorkerState::Exited: return "exited";
    case WorkerState::Failed: return "failed";
    case WorkerState::Stopped: return "stopped";
    }
    return "?";
}

WorkerOutput::~WorkerOutput() {
    close_fd(out_fd_);
    close_fd(err_fd_);
    close_fd(log_fd_);
}

void WorkerOutput::close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
}

void WorkerOutput::open_log(const std::filesystem::path& file) {
    if (log_fd_ >= 0) return;
    // Never through a link planted at logs/ or logs/<name>.log (safe_file.hpp).
    log_fd_ = safe::open_file(file, O_WRONLY | O_CREAT | O_APPEND).release();
}

void WorkerOutput::attach(int out_fd, int err_fd) {
    close_fd(out_fd_);
    close_fd(err_fd_);
    out_fd_ = out_fd;
    err_fd_ = err_fd;
    last_err_.clear();
}

void WorkerOutput::note(std::string_view text) {
    if (log_fd_ < 0) return;
    std::string s = fmt::format("--- hsring: {}\n", text);
    [[maybe_unused]] auto n = ::write(log_fd_, s.data(), s.size());
}

void WorkerOutput::line(std::string_view text, bool is_err, const std::string& worker, Console& console) {
    if (is_err && !text.empty()) last_err_ = std::string(text);
    if (log_fd_ >= 0) {
        std::string s(text);
        s += '\n';
        // One write per line (O_APPEND): a line is never split in the log.
        [[maybe_unused]] auto n = ::write(log_fd_, s.data(), s.size());
    }
    console.worker_line(worker, text);
}

void WorkerOutput::pump(int fd, const std::string& worker, Console& console) {
    const bool is_err = fd == err_fd_;
    LineReader& r = is_err ? err_ : out_;
    auto on_line = [&](std::string_view l) { line(l, is_err, worker, console); };
    if (!r.pump(fd, on_line)) {
        r.flush(on_line);
        close_fd(is_err ? err_fd_ : out_fd_);
    }
}

void WorkerOutput::drain(const std::string& worker, Console& console) {
    // The process is gone: whatever it wrote is in the pipes now (a descendant that still holds
    // them open would keep us waiting, so read what is there and close).
    for (int* fd : {&out_fd_, &err_fd_}) {
        if (*fd < 0) continue;
        const bool is_err = fd == &err_fd_;
        LineReader& r = is_err ? err_ : out_;
        auto on_line = [&](std::string_view l) { line(l, is_err, worker, console); };
        r.pump(*fd, on_line);
        r.flush(on_line);
        close_fd(*fd);
    }
}

} // namespace hsring::supervisor
