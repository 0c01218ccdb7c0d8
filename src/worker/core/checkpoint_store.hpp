#pragma once
// Checkpoints of one drafter under RUN_DIR/checkpoints:
//
//   step-00000200/        committed checkpoints (the compute writes what it needs inside)
//   step-00000400/
//   latest                text: the step of the newest committed checkpoint
//   .tmp-step-00000600/   being written (or a replaced checkpoint being removed); never read;
//                         removed when found stale
//   .old-step-00000400/   a replaced checkpoint moved aside (filesystems without RENAME_EXCHANGE);
//                         put back at the next start if the new one never took its name
//
// A checkpoint is committed by fsync + rename of its directory, then an atomic replace of
// `latest`. A crash at any point leaves `latest` naming a complete checkpoint (or none), also when
// a directory of the same step exists (an incarnation that died after committing it, which
// `latest` may name): the new one takes its name in one atomic exchange, and the old one is
// removed only afterwards.
// Nothing here is opened through a symbolic link (hsring/safe_file.hpp): `checkpoints`, `latest`
// and `latest.tmp` are resolved without following links, and each temporary directory is made
// fresh, so what a compute writes inside it cannot meet a planted link. A checkpoint directory
// that cannot be written is a user error (hsring::UserError: the worker exits 3), found at start.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace hsring::worker {

class CheckpointStore {
public:
    explicit CheckpointStore(std::filesystem::path dir, unsigned keep = 2);

    // 0 when there is no committed checkpoint.
    std::uint64_t latest_step() const;
    std::filesystem::path dir_of(std::uint64_t step) const;

    // A fresh temporary directory for the checkpoint of `step`.
    std::filesystem::path begin(std::uint64_t step);
    // Makes `tmp` the committed checkpoint of `step` and prunes older ones (keeps `keep`).
    void commit(std::uint64_t step, const std::filesystem::path& tmp);
    // A small file `name` inside the temporary directory `tmp` (O_EXCL, never through a link).
    void write_file(const std::filesystem::path& tmp, const std::string& name, const std::string& text);
    // The file `name` of the committed checkpoint of `step`; nullopt when missing.
    std::optional<std::string> read_file(std::uint64_t step, const std::string& name) const;

    // Reads `latest` in RUN_DIR/checkpoints without a store (supervisor, verify).
    static std::uint64_t read_latest(const std::filesystem::path& dir);

private:
    std::filesystem::path dir_;
    std::filesystem::path root_;  // RUN_DIR
    std::string sub_;             // "checkpoints"
    unsigned keep_;
};

// fsync a file or directory; throws on failure.
void fsync_path(const std::filesystem::path& p);

// Tests: `at` is called at each instant of a commit, in order: "synced" (the new directory is on
// disk), "exchanged" (it swapped names with a directory of the same step, which now has the
// temporary name), "aside" (without RENAME_EXCHANGE: that directory moved aside), "renamed" (the
// new one has its name), "latest" (`latest` names it). A test _exit()s there to crash at that
// instant. exchange = false: behave as on a filesystem without RENAME_EXCHANGE.
struct CheckpointTestHooks {
    void (*at)(const char* instant) = nullptr;
    bool exchange = true;
};
void set_checkpoint_test_hooks(const CheckpointTestHooks& hooks);

} // namespace hsring::worker
