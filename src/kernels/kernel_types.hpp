#pragma once
// What every kernel of src/kernels takes and returns, in plain C++ (no CUDA or torch headers):
// the element type of its tensors, and the error code of a launch (0 = queued).
#include <cstdint>

namespace hsring::kernels {

enum class Dtype : std::uint8_t { Float32, Float16, BFloat16 };

// The CUDA runtime's name for an error code a kernel launcher returned.
const char* error_string(int code);

} // namespace hsring::kernels
