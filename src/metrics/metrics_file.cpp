// metrics.jsonl and its TensorBoard mirror (see hsring/metrics_file.hpp).
#include "hsring/metrics_file.hpp"

#include "hsring/error.hpp"
#include "hsring/log.hpp"
#include "hsring/safe_file.hpp"
#ifdef HSRING_HAVE_TENSORBOARD
#include "tensorboard/metric_scalars.hpp"
#else
namespace hsring::tensorboard {
class MetricsMirror {};
}
#endif

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace hsring {

bool tensorboard_built() {
#ifdef HSRING_HAVE_TENSORBOARD
    return true;
#else
    return false;
#endif
}

MetricsFile::MetricsFile(const std::filesystem::path& file, const std::filesystem::path& tensorboard_dir) {
    fd_ = safe::open_file(file, O_WRONLY | O_CREAT | O_APPEND).release();  // never through a planted link
    if (tensorboard_dir.empty()) return;
#ifdef HSRING_HAVE_TENSORBOARD
    try {
        mirror_ = std::make_unique<tensorboard::MetricsMirror>(tensorboard_dir);
        log::info("TensorBoard events: {} (tensorboard --logdir {})", mirror_->path().string(),
                  tensorboard_dir.string());
    } catch (const std::exception& e) {
        log::warn("no TensorBoard events for this run: {} (metrics.jsonl is written as always)", e.what());
    }
#else
    log::info("this hsring was built without TensorBoard support (protobuf missing when it was configured): "
              "metrics go to {} only", file.string());
#endif
}

MetricsFile::~MetricsFile() {
    if (fd_ >= 0) ::close(fd_);
}

void MetricsFile::append(const nlohmann::json& row) {
    std::string line = row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    std::size_t off = 0;
    while (off < line.size()) {
        const ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
        if (n > 0) {
            off += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        // A short write leaves errno as it was (a stale value): a write that wrote nothing with no
        // error is a full disk too.
        const int err = n < 0 ? errno : ENOSPC;
        if (err == ENOSPC || err == EDQUOT)  // a restart cannot free space: a user error (exit 3)
            throw UserError(fmt::format("cannot append to metrics.jsonl: {}: free disk space, or choose another run "
                                        "directory (--run-dir DIR); `hsring run` then resumes from the last checkpoint",
                                        errno_text(err)));
        fail("cannot append to metrics.jsonl: {}", errno_text(err));
    }
#ifdef HSRING_HAVE_TENSORBOARD
    if (!mirror_) return;
    try {
        mirror_->append(row);
    } catch (const std::exception& e) {
        log::warn("TensorBoard events stopped: {} (metrics.jsonl is written as always)", e.what());
        mirror_.reset();
    }
#endif
}

} // namespace hsring
