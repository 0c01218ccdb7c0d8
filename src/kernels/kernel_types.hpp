#pragma once
// What every kernel of src/kernels takes and returns, in plain C++ (no CUDA or torch headers):
// the element type of its tensors, and the outcome of a launch.
#include <cstdint>

namespace hsring::kernels {

enum class Dtype : std::uint8_t { Float32, Float16, BFloat16 };

// What a launcher returns: error 0 = the kernel is queued; else a cudaError_t and whose it is.
// earlier: the error was pending before this launch (an earlier call's, or a fault of earlier
// asynchronous work), not this kernel's: the kernel was not launched and the error is left
// pending. Otherwise it is this launch's own (bad arguments, a launch the runtime refused).
// (Reading cudaGetLastError() only after the launch returned and cleared an earlier error as if
// this launch had failed.)
struct LaunchStatus {
    int error = 0;
    bool earlier = false;
    bool ok() const { return error == 0; }
};

// The CUDA runtime's name for an error code a kernel launcher returned.
const char* error_string(int code);

} // namespace hsring::kernels
