#include "worker/checkpoint_store.hpp"

#include "hsring/error.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <vector>

namespace hsring::worker {

namespace fs = std::filesystem;

void fsync_path(const fs::path& p) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("cannot open {} to sync it: {}", p.string(), errno_text(errno));
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) fail("cannot sync {}: {}", p.string(), errno_text(err));
}

CheckpointStore::CheckpointStore(fs::path dir, unsigned keep) : dir_(std::move(dir)), keep_(keep) {
    fs::create_directories(dir_);
    for (const auto& e : fs::directory_iterator(dir_))
        if (e.path().filename().string().rfind(".tmp-", 0) == 0) fs::remove_all(e.path());  // a crash mid-write
}

std::uint64_t CheckpointStore::read_latest(const fs::path& dir) {
    std::ifstream in(dir / "latest");
    std::uint64_t step = 0;
    if (!(in >> step)) return 0;
    if (!fs::is_directory(dir / fmt::format("step-{:08}", step)))
        fail("{}/latest names step {}, but its directory is missing: the run directory was damaged; remove "
             "`latest` to start from scratch", dir.string(), step);
    return step;
}

std::uint64_t CheckpointStore::latest_step() const { return read_latest(dir_); }

fs::path CheckpointStore::dir_of(std::uint64_t step) const { return dir_ / fmt::format("step-{:08}", step); }

fs::path CheckpointStore::begin(std::uint64_t step) {
    fs::path tmp = dir_ / fmt::format(".tmp-step-{:08}", step);
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    return tmp;
}

void CheckpointStore::commit(std::uint64_t step, const fs::path& tmp) {
    for (const auto& e : fs::recursive_directory_iterator(tmp))
        if (e.is_regular_file()) fsync_path(e.path());
    for (const auto& e : fs::recursive_directory_iterator(tmp))
        if (e.is_directory()) fsync_path(e.path());
    fsync_path(tmp);
    const fs::path final_dir = dir_of(step);
    fs::remove_all(final_dir);  // a checkpoint of the same step from an incarnation that died
    fs::rename(tmp, final_dir);
    {
        std::ofstream out(dir_ / "latest.tmp", std::ios::trunc);
        out << step << "\n";
        out.flush();
        if (!out) fail("cannot write {}/latest.tmp", dir_.string());
    }
    fsync_path(dir_ / "latest.tmp");
    fs::rename(dir_ / "latest.tmp", dir_ / "latest");
    fsync_path(dir_);
    // Prune: keep the newest `keep` committed checkpoints.
    std::vector<fs::path> steps;
    for (const auto& e : fs::directory_iterator(dir_))
        if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0) steps.push_back(e.path());
    std::sort(steps.begin(), steps.end());
    for (std::size_t i = 0; i + keep_ < steps.size(); ++i)
        if (steps[i] != final_dir) fs::remove_all(steps[i]);
}

} // namespace hsring::worker
