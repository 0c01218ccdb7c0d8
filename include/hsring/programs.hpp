#pragma once
// Finding hsring's own programs (hsring-target, hsring-drafter, hsring-model, hsring-bench-ring)
// from any of them: $HSRING_BIN_DIR, then this executable's directory (installed layout), then
// the build tree's folders (compiled-in build root), then $PATH.
#include <filesystem>
#include <string_view>

namespace hsring {

// Throws hsring::Error listing where it looked.
std::filesystem::path locate_program(std::string_view name);

// This process's executable (/proc/self/exe).
std::filesystem::path self_exe();

// Replaces the process with `program` (argv[0] = its name); throws on failure.
[[noreturn]] void exec_program(std::string_view name, int argc, char** argv);

} // namespace hsring
