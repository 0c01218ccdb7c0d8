#pragma once
// Helpers shared by the model tests: temporary directories, error messages, the GPU gate.
#include "hsring/error.hpp"

#include <doctest/doctest.h>
#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <torch/cuda.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace hsring::test {

// A fresh directory under $TMPDIR, removed with everything in it.
class TempDir {
public:
    TempDir() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "hsring-model-XXXXXX").string();
        if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
        path_ = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

// The message of the hsring::Error `f` throws; a test failure when it throws nothing.
template <typename F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const hsring::Error& e) {
        return e.what();
    }
    FAIL_CHECK("expected an hsring::Error");
    return {};
}

// dtype names for CHECKs (doctest cannot print c10::ScalarType: ADL finds c10::toString).
inline std::string dt(c10::ScalarType t) { return c10::toString(t); }

inline std::string env_or(const char* name, const std::string& fallback) {
    const char* v = std::getenv(name);
    return v && *v ? v : fallback;
}

// One Python process per test program runs the reference scripts (tests/model/py_server.py):
// importing torch and transformers once instead of once per script saves ~4.5 s each. Started at
// the first script; ends when the test program closes its stdin (at exit).
class PythonServer {
public:
    static PythonServer& get() {
        static PythonServer s;
        return s;
    }
    // The script's exit code; -1 when the server died (it is started again for the next one).
    int run(const std::string& script, const std::string& args, const std::string& py) {
        if (pid_ <= 0 && !start(py)) return -1;
        const std::string line = nlohmann::json{{"script", script}, {"args", args}}.dump() + "\n";
        if (::write(to_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return died();
        char buf[32] = {};
        if (!std::fgets(buf, sizeof buf, from_)) return died();
        return std::atoi(buf);
    }
    ~PythonServer() {
        if (to_ >= 0) ::close(to_);
        if (from_) std::fclose(from_);
        if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
    }

private:
    bool start(const std::string& py) {
        int req[2], resp[2];
        if (::pipe(req) != 0 || ::pipe(resp) != 0) return false;
        const std::string server = env_or("HSRING_SOURCE_ROOT", ".") + "/tests/model/py_server.py";
        pid_ = ::fork();
        if (pid_ == 0) {
            ::dup2(req[0], 0);
            ::dup2(resp[1], 3);
            for (int fd : {req[0], req[1], resp[0], resp[1]})
                if (fd > 3) ::close(fd);
            ::execlp(py.c_str(), py.c_str(), server.c_str(), "3", static_cast<char*>(nullptr));
            ::_exit(127);
        }
        ::close(req[0]);
        ::close(resp[1]);
        to_ = req[1];
        from_ = ::fdopen(resp[0], "r");
        return pid_ > 0 && from_;
    }
    int died() {
        ::close(to_);
        std::fclose(from_);
        ::waitpid(pid_, nullptr, 0);
        to_ = -1, from_ = nullptr, pid_ = 0;
        return -1;
    }
    pid_t pid_ = 0;
    int to_ = -1;
    std::FILE* from_ = nullptr;
};

// Runs tests/model/SCRIPT ARGS (shell-quoted) with $HSRING_PYTHON (the build's .venv) where it
// exists, else python3 from PATH, in the test program's Python server; exits the test program
// with 77 (skipped) when the script reports that its reference cannot be imported, and fails the
// test for any other error.
inline void run_python_script(const std::string& script, const std::string& args) {
    std::string py = env_or("HSRING_PYTHON", "python3");
    if (py.find('/') != std::string::npos && ::access(py.c_str(), X_OK) != 0) py = "python3";
    const std::string src = env_or("HSRING_SOURCE_ROOT", ".");
    const std::string path = src + "/tests/model/" + script;
    const int code = PythonServer::get().run(path, args, py);
    if (code == 77) {
        std::fprintf(stderr, "skipped: %s cannot import its reference with %s\n", script.c_str(), py.c_str());
        std::exit(77);
    }
    REQUIRE_MESSAGE(code == 0, "reference script failed (exit " << code << "): " << py << " " << path << " " << args);
}

// GPU-only tests: exit 77 (meson's "skipped") without a CUDA device, unless
// HSRING_GPU_TESTS=required, where a missing GPU fails.
// ||got - want|| / ||want|| in fp64 on the CPU, whatever the devices and dtypes of the two.
inline double relative_error(const at::Tensor& got, const at::Tensor& want) {
    const at::Tensor w = want.to(at::kCPU, at::kDouble);
    return (got.to(at::kCPU, at::kDouble) - w).norm().item<double>() / w.norm().item<double>();
}

inline void require_gpu_or_skip() {
    if (torch::cuda::is_available()) return;
    const char* req = std::getenv("HSRING_GPU_TESTS");
    if (req && std::strcmp(req, "required") == 0) {
        std::fprintf(stderr, "no CUDA device visible to torch, and HSRING_GPU_TESTS=required\n");
        std::exit(1);
    }
    std::fprintf(stderr, "skipped: no CUDA device visible to torch (or torch_cuda not linked)\n");
    std::exit(77);
}

} // namespace hsring::test

// Readable doctest messages for torch types.
namespace doctest {
template <>
struct StringMaker<c10::IntArrayRef> {
    static String convert(c10::IntArrayRef a) {
        std::string s = "[";
        for (std::size_t i = 0; i < a.size(); ++i) s += (i ? ", " : "") + std::to_string(a[i]);
        return (s + "]").c_str();
    }
};
} // namespace doctest
