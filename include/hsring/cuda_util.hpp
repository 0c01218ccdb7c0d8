#pragma once
// Small CUDA runtime helpers (no torch). Compiled only where the CUDA runtime is found
// (HSRING_HAVE_CUDA); every call's error is checked, cleared and reported with context.
#include <cstddef>
#include <string>

#ifdef HSRING_HAVE_CUDA
#include <cuda_runtime_api.h>

namespace hsring::cuda {

// Throws hsring::Error "WHAT: cudaErrorName: description" and clears the sticky error state
// where the runtime allows it.
void check(cudaError_t err, const char* what);
#define HSRING_CUDA(call) ::hsring::cuda::check((call), #call)

// Number of visible devices; 0 when there is no driver or no device (never throws).
int device_count();

// Copy bandwidth (GB/s, 1e9 bytes/s) between pinned host memory (cudaMallocHost) and the
// current device: median of `reps` copies of `bytes`, timed with events.
struct PinnedBandwidth { double h2d_gbs; double d2h_gbs; };
PinnedBandwidth measure_pinned_bandwidth(std::size_t bytes, int reps);

} // namespace hsring::cuda
#endif

namespace hsring::cuda {
// True when this build has the CUDA runtime and a device is visible.
bool available();
}
