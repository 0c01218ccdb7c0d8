// The data files a config names exist and can be read (see check_data_files in hsring/config.hpp).
#include "hsring/config.hpp"
#include "hsring/error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace hsring {

namespace {

// True when the file holds a character other than blanks; reads only up to the first one.
bool holds_text(int fd, const std::string& at, const std::filesystem::path& path) {
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int e = errno;
            ::close(fd);
            fail("{}: cannot read {}: {}", at, path.string(), errno_text(e));
        }
        if (n == 0) return false;
        for (ssize_t i = 0; i < n; ++i)
            if (buf[i] != ' ' && buf[i] != '\t' && buf[i] != '\r' && buf[i] != '\n') return true;
    }
}

void check_data_file(const Config& cfg, const char* table, const char* key, const std::filesystem::path& value) {
    const std::filesystem::path path = cfg.resolve(value);
    const std::string at = fmt::format("{}: [{}] {} = \"{}\"", cfg.file.string(), table, key, value.string());
    // A relative value is resolved against the config file's directory: say so, it is the usual surprise.
    const char* relative = value.is_absolute() ? "" : " (a relative path is resolved against the config file's directory)";
    constexpr const char* kFix = "give a pre-tokenized JSONL file, one {\"input_ids\": [...], \"loss_mask\": [...]} per "
                                 "line (bin/prepare-data writes it)";
    // O_NONBLOCK: a FIFO planted at the path must not hang the check.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        const int e = errno;
        if (e == ENOENT) fail("{}: cannot read {}: no such file{}: {}", at, path.string(), relative, kFix);
        fail("{}: cannot read {}{}: {}", at, path.string(), relative, errno_text(e));
    }
    struct stat st {};
    const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    const bool text = regular && holds_text(fd, at, path);
    ::close(fd);
    if (!regular)
        fail("{}: {} is {}, not a file{}: {}", at, path.string(), S_ISDIR(st.st_mode) ? "a directory" : "not a regular file",
             relative, kFix);
    if (!text) fail("{}: {} is empty (no sample): {}", at, path.string(), kFix);
}

} // namespace

void check_data_files(const Config& cfg) {
    check_data_file(cfg, "data", "path", cfg.data.path);
    if (!cfg.data.eval_path.empty()) check_data_file(cfg, "data", "eval_path", cfg.data.eval_path);
    if (!cfg.eval.spec_prompts.empty()) check_data_file(cfg, "eval", "spec_prompts", cfg.eval.spec_prompts);
}

} // namespace hsring
