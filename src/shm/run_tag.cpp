// Run tags of shared-memory objects (see hsring/run_tag.hpp and shm/run_tag_block.hpp).
#include "hsring/run_tag.hpp"

#include "hsring/error.hpp"
#include "shm/run_tag_block.hpp"

#include <pwd.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

namespace hsring {

namespace {

std::string user_name(std::uint32_t uid) {
    struct passwd pw{}, *found = nullptr;
    char buf[1024];
    if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found) return found->pw_name;
    return "?";
}

} // namespace

std::string RunTag::canonical_dir(const std::string& run_dir) {
    if (run_dir.empty()) return run_dir;
    std::error_code ec;
    auto p = std::filesystem::weakly_canonical(std::filesystem::absolute(run_dir), ec);
    if (ec) return std::filesystem::absolute(run_dir).lexically_normal().string();
    std::string s = p.string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    return s;
}

RunTag RunTag::of(const std::string& run_dir, std::uint64_t layout_hash, std::uint64_t data_fingerprint,
                  std::uint32_t node_rank, std::uint32_t nnodes) {
    return RunTag{canonical_dir(run_dir), layout_hash, data_fingerprint, static_cast<std::uint32_t>(::geteuid()),
                  node_rank, nnodes};
}

std::string RunTag::differences(const RunTag& found) const {
    std::vector<std::string> d;
    if (!run_dir.empty() && found.run_dir != run_dir)
        d.push_back(fmt::format("run dir {} (this run: {})", found.run_dir.empty() ? "?" : found.run_dir, run_dir));
    if (found.owner_uid != owner_uid)
        d.push_back(fmt::format("user {} (uid {}; this run: {}, uid {})", user_name(found.owner_uid), found.owner_uid,
                                user_name(owner_uid), owner_uid));
    if (data_fingerprint && found.data_fingerprint != data_fingerprint)
        d.push_back(fmt::format("another data set: fingerprint {:016x} (this run: {:016x})", found.data_fingerprint,
                                data_fingerprint));
    if (layout_hash && found.layout_hash != layout_hash)
        d.push_back(fmt::format("layout {:016x} (this run: {:016x})", found.layout_hash, layout_hash));
    if (found.node_rank != node_rank || found.nnodes != nnodes)
        d.push_back(fmt::format("machine {} of {} (this run: machine {} of {})", found.node_rank, found.nnodes,
                                node_rank, nnodes));
    std::string s;
    for (const auto& x : d) s += (s.empty() ? "" : ", ") + x;
    return s;
}

std::string RunTag::str() const {
    return fmt::format("run dir {} of user {} (uid {}), machine {} of {}, data {:016x}, layout {:016x}",
                       run_dir.empty() ? "?" : run_dir, user_name(owner_uid), owner_uid, node_rank, nnodes,
                       data_fingerprint, layout_hash);
}

void refuse_foreign(std::string_view what, std::string_view name, std::string_view path, const RunTag& found,
                    const RunTag& expected, std::string_view ring_name) {
    fail("{} '{}' ({}) belongs to another run: {}. It was made by the run in {}. If that run is over, remove its "
         "shared memory (hsring ring rm {}) or start this run with `hsring run --fresh` (neither removes a ring "
         "that a live process uses); to run both at once, give this run another [run] name or [ring] name",
         what, name, path, expected.differences(found), found.run_dir.empty() ? "?" : found.run_dir, ring_name);
}

namespace shm {

void RunTagBlock::store(const RunTag& tag) {
    if (tag.run_dir.size() >= sizeof run_dir)
        fail("the run directory {} is longer than {} bytes: choose a shorter one", tag.run_dir, sizeof run_dir - 1);
    std::memset(run_dir, 0, sizeof run_dir);
    std::memcpy(run_dir, tag.run_dir.data(), tag.run_dir.size());
    layout_hash = tag.layout_hash;
    data_fingerprint = tag.data_fingerprint;
    owner_uid = tag.owner_uid;
    node_rank = tag.node_rank;
    nnodes = tag.nnodes;
    reserved = 0;
}

RunTag RunTagBlock::load() const {
    RunTag t;
    t.run_dir.assign(run_dir, strnlen(run_dir, sizeof run_dir));
    t.layout_hash = layout_hash;
    t.data_fingerprint = data_fingerprint;
    t.owner_uid = owner_uid;
    t.node_rank = node_rank;
    t.nnodes = nnodes;
    return t;
}

} // namespace shm
} // namespace hsring
