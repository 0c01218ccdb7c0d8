#pragma once
// Helpers shared by the model tests: temporary directories, error messages, the GPU gate.
#include "hsring/error.hpp"

#include <doctest/doctest.h>
#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <torch/cuda.h>

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

// Runs tests/model/SCRIPT ARGS with $HSRING_PYTHON (the build's .venv) where it exists, else
// python3 from PATH; exits the test program with 77 (skipped) when the script reports that its
// reference cannot be imported, and fails the test for any other error.
inline void run_python_script(const std::string& script, const std::string& args) {
    std::string py = env_or("HSRING_PYTHON", "python3");
    if (py.find('/') != std::string::npos && ::access(py.c_str(), X_OK) != 0) py = "python3";
    const std::string src = env_or("HSRING_SOURCE_ROOT", ".");
    const std::string cmd = "'" + py + "' '" + src + "/tests/model/" + script + "' " + args;
    const int rc = std::system(cmd.c_str());
    const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    if (code == 77) {
        std::fprintf(stderr, "skipped: %s cannot import its reference with %s\n", script.c_str(), py.c_str());
        std::exit(77);
    }
    REQUIRE_MESSAGE(code == 0, "reference script failed: " << cmd);
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
