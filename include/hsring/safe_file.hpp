#pragma once
// Files of a run directory, opened without following symbolic links (invariant 8, docs/architecture.md).
//
// The run directory itself is the path the user gave (it may be a link to a bigger disk); every
// name beneath it is resolved one component at a time with O_NOFOLLOW, so a link planted at
// `checkpoints`, `logs/target.0.log` or `checkpoints/latest.tmp` is refused with a message that
// names it, never followed. Temporaries are created with O_EXCL and renamed into place.
#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace hsring::safe {

// An owned file descriptor.
class Fd {
public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    Fd(Fd&& o) noexcept : fd_(o.release()) {}
    Fd& operator=(Fd&& o) noexcept;
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd();
    int get() const { return fd_; }
    int release();
    explicit operator bool() const { return fd_ >= 0; }

private:
    int fd_ = -1;
};

// Creates `dir` (mode 0700; missing parents with the default mode) or checks the existing one:
// it must be a directory of this user that neither its group nor others may write. Throws
// hsring::Error naming the directory, its owner or mode, and what to do.
void make_private_dir(const std::filesystem::path& dir);

// Opens `rel` ("a/b/c", relative) beneath the directory `dir` without following a symbolic link
// at any component of `rel`. With O_CREAT in `flags`, missing intermediate directories are made
// (mode 0700). O_NOFOLLOW and O_CLOEXEC are always added. Throws hsring::Error (a link: "refusing
// to follow the symbolic link ..."); with O_CREAT absent, a missing file returns an empty Fd.
Fd open_beneath(const std::filesystem::path& dir, std::string_view rel, int flags, mode_t mode = 0644);
// The directory `rel` beneath `dir` (O_DIRECTORY), made (0700) when `create`; empty Fd when it
// does not exist and !create.
Fd open_dir_beneath(const std::filesystem::path& dir, std::string_view rel, bool create);

// The whole text of `rel` beneath `dir`; nullopt when it does not exist.
std::optional<std::string> read_beneath(const std::filesystem::path& dir, std::string_view rel);
// A file given by its full path: `file.parent_path()` is followed, the name is not.
std::optional<std::string> read_file(const std::filesystem::path& file);
Fd open_file(const std::filesystem::path& file, int flags, mode_t mode = 0644);

// Replaces `rel` beneath `dir` atomically: the text goes to a fresh temporary "<rel>.tmp"
// (a stale one is removed first; O_EXCL, never through a link), is synced when `sync`, and is
// renamed over `rel` (the directory is synced too when `sync`).
void write_atomic(const std::filesystem::path& dir, std::string_view rel, std::string_view text, bool sync);

// Writes all of `text` to `fd`; throws naming `what` on failure.
void write_all(int fd, std::string_view text, const std::string& what);

} // namespace hsring::safe
