// Run-directory files without following links (see hsring/safe_file.hpp).
#include "hsring/safe_file.hpp"

#include "hsring/error.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace hsring::safe {

namespace fs = std::filesystem;

Fd& Fd::operator=(Fd&& o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = o.release();
    }
    return *this;
}

Fd::~Fd() {
    if (fd_ >= 0) ::close(fd_);
}

int Fd::release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
}

namespace {

std::string user_name(uid_t uid) {
    struct passwd pw{}, *found = nullptr;
    char buf[1024];
    if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found) return found->pw_name;
    return "?";
}

std::vector<std::string> components(std::string_view rel) {
    std::vector<std::string> out;
    std::size_t b = 0;
    while (b <= rel.size()) {
        std::size_t e = rel.find('/', b);
        if (e == std::string_view::npos) e = rel.size();
        std::string c(rel.substr(b, e - b));
        if (c == "..") fail("'{}' leaves its directory: not a run-directory file", rel);
        if (!c.empty() && c != ".") out.push_back(std::move(c));
        b = e + 1;
    }
    if (out.empty()) fail("'{}' names no file", rel);
    return out;
}

[[noreturn]] void open_failed(const fs::path& path, int err) {
    if (err == ELOOP || err == EMLINK)
        fail("{} is a symbolic link: refusing to follow it (hsring never writes through a link in a run directory); "
             "remove the link", path.string());
    if (err == ENOTDIR) fail("{} is not a directory (or a component of it is a symbolic link): refusing it", path.string());
    fail("cannot open {}: {}", path.string(), errno_text(err));
}

// Walks the intermediate components of `parts` (all but the last) beneath `dir`; returns the
// directory that holds the last one, or an empty Fd when one is missing and !create.
Fd walk(const fs::path& dir, const std::vector<std::string>& parts, std::size_t depth, bool create) {
    Fd cur(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!cur) {
        if (errno == ENOENT && !create) return Fd{};
        fail("cannot open the directory {}: {}", dir.string(), errno_text(errno));
    }
    fs::path where = dir;
    for (std::size_t i = 0; i < depth; ++i) {
        where /= parts[i];
        if (create && ::mkdirat(cur.get(), parts[i].c_str(), 0700) != 0 && errno != EEXIST)
            fail("cannot create the directory {}: {}", where.string(), errno_text(errno));
        Fd next(::openat(cur.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!next) {
            if (errno == ENOENT && !create) return Fd{};
            open_failed(where, errno);
        }
        cur = std::move(next);
    }
    return cur;
}

} // namespace

void make_private_dir(const fs::path& dir) {
    std::error_code ec;
    if (dir.has_parent_path()) fs::create_directories(dir.parent_path(), ec);
    if (ec) fail("cannot create {} (the run directory's parent): {}", dir.parent_path().string(), ec.message());
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
        fail("cannot create the run directory {}: {}", dir.string(), errno_text(errno));
    Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) fail("cannot open the run directory {}: {}", dir.string(), errno_text(errno));
    struct stat st{};
    if (::fstat(fd.get(), &st) != 0) fail("cannot stat the run directory {}: {}", dir.string(), errno_text(errno));
    if (st.st_uid != ::geteuid())
        fail("the run directory {} belongs to uid {} ({}), not to you (uid {}): hsring runs only in a run directory "
             "of its own user; choose another one (--run-dir DIR, or [run] run_dir)", dir.string(), st.st_uid,
             user_name(st.st_uid), ::geteuid());
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        fail("the run directory {} has mode {:04o}: its group or other users could plant files or links in it. "
             "Make it private (chmod 700 {}) or choose another one (--run-dir DIR)", dir.string(),
             st.st_mode & 07777, dir.string());
}

Fd open_beneath(const fs::path& dir, std::string_view rel, int flags, mode_t mode) {
    const auto parts = components(rel);
    const bool create = (flags & O_CREAT) != 0;
    Fd parent = walk(dir, parts, parts.size() - 1, create);
    if (!parent) return Fd{};
    Fd f(::openat(parent.get(), parts.back().c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode));
    if (!f) {
        if (errno == ENOENT && !create) return Fd{};
        open_failed(dir / std::string(rel), errno);
    }
    return f;
}

Fd open_dir_beneath(const fs::path& dir, std::string_view rel, bool create) {
    const auto parts = components(rel);
    return walk(dir, parts, parts.size(), create);
}

namespace {

std::optional<std::string> read_all(Fd f, const fs::path& path) {
    if (!f) return std::nullopt;
    std::string text;
    char buf[8192];
    for (;;) {
        const ssize_t n = ::read(f.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("cannot read {}: {}", path.string(), errno_text(errno));
        if (n == 0) break;
        text.append(buf, static_cast<std::size_t>(n));
    }
    return text;
}

} // namespace

std::optional<std::string> read_beneath(const fs::path& dir, std::string_view rel) {
    return read_all(open_beneath(dir, rel, O_RDONLY), dir / std::string(rel));
}

std::optional<std::string> read_file(const fs::path& file) {
    return read_all(open_file(file, O_RDONLY), file);
}

Fd open_file(const fs::path& file, int flags, mode_t mode) {
    const fs::path parent = file.has_parent_path() ? file.parent_path() : fs::path(".");
    return open_beneath(parent, file.filename().string(), flags, mode);
}

void write_all(int fd, std::string_view text, const std::string& what) {
    std::size_t off = 0;
    while (off < text.size()) {
        const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("cannot write {}: {}", what, errno_text(errno));
        off += static_cast<std::size_t>(n);
    }
}

void write_atomic(const fs::path& dir, std::string_view rel, std::string_view text, bool sync) {
    const auto parts = components(rel);
    Fd parent = walk(dir, parts, parts.size() - 1, true);
    const std::string name = parts.back(), tmp = name + ".tmp";
    const fs::path path = dir / std::string(rel), tmp_path = path.string() + ".tmp";
    // A stale temporary (a writer that died) or a planted link: unlink removes the name itself.
    if (::unlinkat(parent.get(), tmp.c_str(), 0) != 0 && errno != ENOENT)
        fail("cannot remove the stale {}: {}", tmp_path.string(), errno_text(errno));
    {
        Fd f(::openat(parent.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
        if (!f) open_failed(tmp_path, errno);
        write_all(f.get(), text, tmp_path.string());
        if (sync && ::fsync(f.get()) != 0) fail("cannot sync {}: {}", tmp_path.string(), errno_text(errno));
    }
    if (::renameat(parent.get(), tmp.c_str(), parent.get(), name.c_str()) != 0)
        fail("cannot rename {} to {}: {}", tmp_path.string(), path.string(), errno_text(errno));
    if (sync && ::fsync(parent.get()) != 0) fail("cannot sync the directory of {}: {}", path.string(), errno_text(errno));
}

} // namespace hsring::safe
