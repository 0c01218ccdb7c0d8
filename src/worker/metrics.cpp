#include "worker/metrics.hpp"

#include "hsring/error.hpp"

#include <fcntl.h>
#include <unistd.h>

namespace hsring::worker {

MetricsFile::MetricsFile(const std::filesystem::path& file) {
    fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot open {}: {}", file.string(), errno_text(errno));
}

MetricsFile::~MetricsFile() {
    if (fd_ >= 0) ::close(fd_);
}

void MetricsFile::append(const std::string& obj) {
    std::string line = obj + "\n";
    if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
        fail("cannot append to metrics.jsonl: {}", errno_text(errno));
}

} // namespace hsring::worker
