#pragma once
// GPU tests: exit 77 (meson's "skipped") when this build has no CUDA or no device is visible,
// unless HSRING_GPU_TESTS=required (bin/gpu-build), where a missing GPU is a failure.
#include "hsring/cuda_util.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hsring::test {

inline void require_gpu_or_skip() {
    if (hsring::cuda::available()) return;
    const char* req = std::getenv("HSRING_GPU_TESTS");
    if (req && std::strcmp(req, "required") == 0) {
        std::fprintf(stderr, "no CUDA device visible, and HSRING_GPU_TESTS=required\n");
        std::exit(1);
    }
    std::fprintf(stderr, "skipped: no CUDA device visible (or built without CUDA)\n");
    std::exit(77);
}

} // namespace hsring::test
