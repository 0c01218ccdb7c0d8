#include "worker/core/checkpoint_store.hpp"

#include "hsring/error.hpp"
#include "hsring/safe_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <optional>
#include <string>
#include <vector>

namespace hsring::worker {

namespace fs = std::filesystem;

void fsync_path(const fs::path& p) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) fail("cannot open {} to sync it: {}", p.string(), errno_text(errno));
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) fail("cannot sync {}: {}", p.string(), errno_text(err));
}

namespace {

CheckpointTestHooks g_hooks;

void instant(const char* name) {
    if (g_hooks.at) g_hooks.at(name);
}

[[noreturn]] void unwritable(const fs::path& dir, const std::string& why) {
    // Restarting cannot make a directory writable: a user error (exit 3), not a crash to retry.
    throw UserError(fmt::format("the checkpoint directory {} is not writable ({}): fix its permissions or free space, "
                                "or choose another run directory (--run-dir DIR)", dir.string(), why));
}

// An errno that says the directory cannot take the checkpoint (permissions, read-only, full).
bool unwritable_errno(int err) { return err == EACCES || err == EPERM || err == EROFS || err == ENOSPC || err == EDQUOT; }

// Renames `from` to `to` inside the checkpoint directory `parent`, or throws (a user error when the
// directory turned unwritable while the checkpoint was written: a background write takes seconds).
void rename_in(int parent, const fs::path& dir, const std::string& from, const std::string& to) {
    if (::renameat(parent, from.c_str(), parent, to.c_str()) == 0) return;
    const int err = errno;
    if (unwritable_errno(err)) unwritable(dir, fmt::format("cannot rename {} to {}: {}", from, to, errno_text(err)));
    fail("cannot rename {} to {}: {}", (dir / from).string(), (dir / to).string(), errno_text(err));
}

// Why a file cannot be created in root/sub now (nullopt: it can).
std::optional<std::string> write_probe_error(const fs::path& root, const std::string& sub) {
    const std::string probe = sub + "/.write-probe." + std::to_string(::getpid());
    std::optional<std::string> why;
    try {
        safe::Fd f = safe::open_beneath(root, probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
        safe::write_all(f.get(), "probe\n", (root / probe).string());
    } catch (const Error& e) {
        why = e.what();
    }
    ::unlink((root / probe).c_str());
    return why;
}

} // namespace

void set_checkpoint_test_hooks(const CheckpointTestHooks& hooks) { g_hooks = hooks; }

CheckpointStore::CheckpointStore(fs::path dir, unsigned keep) : dir_(std::move(dir)), keep_(keep) {
    // RUN_DIR/checkpoints, never through a link planted there.
    root_ = dir_.parent_path();
    sub_ = dir_.filename().string();
    try {
        safe::open_dir_beneath(root_, sub_, true);
    } catch (const Error& e) {
        unwritable(dir_, e.what());
    }
    // A crash mid-write left these. The drafter ranks of a machine all start here at once and
    // remove the same ones: what another rank removed first is no error.
    // A commit that died between moving a replaced checkpoint aside and renaming the new one in
    // left `latest` naming the one aside: it is complete, so it goes back (or, if the new one took
    // its name, away).
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind(".tmp-", 0) == 0) {
            fs::remove_all(e.path(), ec);
        } else if (name.rfind(".old-step-", 0) == 0) {
            const fs::path committed = dir_ / name.substr(5);
            if (fs::exists(fs::symlink_status(committed, ec))) fs::remove_all(e.path(), ec);
            else ::rename(e.path().c_str(), committed.c_str());  // another rank may have done it first
        }
    }
    // A checkpoint directory we cannot write would fail only at the first checkpoint, after the
    // work of a whole interval: find out now.
    if (const auto why = write_probe_error(root_, sub_)) unwritable(dir_, *why);
}

std::uint64_t CheckpointStore::read_latest(const fs::path& dir) {
    const auto text = safe::read_beneath(dir.parent_path(), dir.filename().string() + "/latest");
    if (!text) return 0;
    const auto b = text->find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return 0;
    std::uint64_t step = 0;
    auto [ptr, ec] = std::from_chars(text->data() + b, text->data() + text->size(), step);
    if (ec != std::errc()) return 0;
    if (!fs::is_directory(fs::symlink_status(dir / fmt::format("step-{:08}", step))))
        fail("{}/latest names step {}, but its directory is missing: the run directory was damaged; remove "
             "`latest` to start from scratch", dir.string(), step);
    return step;
}

std::uint64_t CheckpointStore::latest_step() const { return read_latest(dir_); }

fs::path CheckpointStore::dir_of(std::uint64_t step) const { return dir_ / fmt::format("step-{:08}", step); }

fs::path CheckpointStore::begin(std::uint64_t step) {
    const std::string name = fmt::format(".tmp-step-{:08}", step);
    fs::path tmp = dir_ / name;
    fs::remove_all(tmp);  // removes a link itself, never what it points to
    // A fresh directory that we made (mkdirat fails if anything took the name meanwhile): what
    // the compute writes inside cannot meet a planted link.
    safe::Fd parent = safe::open_dir_beneath(root_, sub_, true);
    if (::mkdirat(parent.get(), name.c_str(), 0700) != 0) {
        const int err = errno;
        if (unwritable_errno(err))
            unwritable(dir_, errno_text(err));
        fail("cannot create {}: {}", tmp.string(), errno_text(err));
    }
    return tmp;
}

void CheckpointStore::write_file(const fs::path& tmp, const std::string& name, const std::string& text) {
    const std::string rel = sub_ + "/" + tmp.filename().string() + "/" + name;
    safe::Fd f = safe::open_beneath(root_, rel, O_WRONLY | O_CREAT | O_EXCL, 0644);
    safe::write_all(f.get(), text, (root_ / rel).string());
}

std::optional<std::string> CheckpointStore::read_file(std::uint64_t step, const std::string& name) const {
    return safe::read_beneath(root_, sub_ + "/" + fmt::format("step-{:08}", step) + "/" + name);
}

void CheckpointStore::commit(std::uint64_t step, const fs::path& tmp) {
    for (const auto& e : fs::recursive_directory_iterator(tmp))
        if (e.is_regular_file()) fsync_path(e.path());
    for (const auto& e : fs::recursive_directory_iterator(tmp))
        if (e.is_directory()) fsync_path(e.path());
    fsync_path(tmp);
    instant("synced");
    const fs::path final_dir = dir_of(step);
    const std::string name = final_dir.filename().string(), tmp_name = tmp.filename().string();
    safe::Fd parent = safe::open_dir_beneath(root_, sub_, true);
    std::string replaced;  // where a checkpoint of the same step went, to be removed
    if (!fs::exists(fs::symlink_status(final_dir))) {
        rename_in(parent.get(), dir_, tmp_name, name);
    } else {
        // A checkpoint of the same step from an incarnation that died, which `latest` may name:
        // removed only once the new one has its name, so `latest` never names a missing or half
        // removed directory. One atomic exchange: the old one then has the temporary name (a
        // crash before its removal leaves a stale `.tmp-` that the next start removes).
        const int rc = g_hooks.exchange ? ::renameat2(parent.get(), tmp_name.c_str(), parent.get(), name.c_str(),
                                                      RENAME_EXCHANGE)
                                        : (errno = EINVAL, -1);
        if (rc == 0) {
            instant("exchanged");
            replaced = tmp_name;
        } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
            // No RENAME_EXCHANGE on this filesystem (NFS, some FUSE): the old one moves aside
            // first; a crash before the new one has its name leaves `latest` naming the one
            // aside, which the next start puts back (see the constructor).
            replaced = ".old-" + name;
            fs::remove_all(dir_ / replaced);
            rename_in(parent.get(), dir_, name, replaced);
            instant("aside");
            try {
                rename_in(parent.get(), dir_, tmp_name, name);
            } catch (...) {
                ::renameat(parent.get(), replaced.c_str(), parent.get(), name.c_str());
                throw;
            }
        } else {
            const int err = errno;
            if (unwritable_errno(err))
                unwritable(dir_, fmt::format("cannot exchange {} with {}: {}", tmp_name, name, errno_text(err)));
            fail("cannot exchange {} with {}: {}", tmp.string(), final_dir.string(), errno_text(err));
        }
    }
    instant("renamed");
    if (!replaced.empty()) fs::remove_all(dir_ / replaced);
    // latest.tmp is made fresh (O_EXCL, a stale one or a link removed first) and renamed over latest.
    try {
        safe::write_atomic(root_, sub_ + "/latest", std::to_string(step) + "\n", true);
    } catch (const Error& e) {
        // The directory turned unwritable after the step's own rename (a background write takes
        // seconds): as there, a user error, not a crash to restart into.
        if (write_probe_error(root_, sub_)) unwritable(dir_, e.what());
        throw;
    }
    instant("latest");
    // Prune: keep the newest `keep` committed checkpoints.
    std::vector<fs::path> steps;
    for (const auto& e : fs::directory_iterator(dir_))
        if (e.symlink_status().type() == fs::file_type::directory &&
            e.path().filename().string().rfind("step-", 0) == 0)
            steps.push_back(e.path());
    std::sort(steps.begin(), steps.end());
    for (std::size_t i = 0; i + keep_ < steps.size(); ++i)
        if (steps[i] != final_dir) fs::remove_all(steps[i]);
}

} // namespace hsring::worker
