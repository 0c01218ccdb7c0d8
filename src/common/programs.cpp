#include "hsring/programs.hpp"

#include "hsring/error.hpp"

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace hsring {

std::filesystem::path self_exe() { return std::filesystem::read_symlink("/proc/self/exe"); }

std::filesystem::path locate_program(std::string_view name) {
    namespace fs = std::filesystem;
    std::vector<fs::path> dirs;
    if (const char* d = std::getenv("HSRING_BIN_DIR")) dirs.emplace_back(d);
    dirs.push_back(self_exe().parent_path());
    for (const char* sub : {"src/cli", "src/worker", "src/model", "src/supervisor", "bench", "bench/ring",
                            "bench/model", "bench/distributed", "tests/supervisor", "tests/ring"})
        dirs.push_back(fs::path(HSRING_BUILD_ROOT) / sub);
    if (const char* path = std::getenv("PATH")) {
        std::string p(path);
        for (std::size_t b = 0, e; b <= p.size(); b = e + 1) {
            e = p.find(':', b);
            if (e == std::string::npos) e = p.size();
            if (e > b) dirs.emplace_back(p.substr(b, e - b));
        }
    }
    std::string looked;
    for (const auto& d : dirs) {
        fs::path c = d / name;
        if (::access(c.c_str(), X_OK) == 0) return c;
        looked += "\n  " + d.string();
    }
    fail("cannot find the program '{}' (looked in:{}); build it with bin/setup or set HSRING_BIN_DIR", name, looked);
}

void exec_program(std::string_view name, int argc, char** argv) {
    auto path = locate_program(name);
    std::vector<char*> args;
    std::string argv0(name);
    args.push_back(argv0.data());
    for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
    ::execv(path.c_str(), args.data());
    fail("exec {}: {}", path.string(), errno_text(errno));
}

} // namespace hsring
