#include "worker/metrics.hpp"

#include "hsring/error.hpp"
#include "hsring/safe_file.hpp"

#include <fcntl.h>
#include <unistd.h>

namespace hsring::worker {

MetricsFile::MetricsFile(const std::filesystem::path& file) {
    fd_ = safe::open_file(file, O_WRONLY | O_CREAT | O_APPEND).release();  // never through a planted link
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
