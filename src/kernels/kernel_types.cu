#include "kernels/kernel_types.hpp"

#include <cuda_runtime.h>

namespace hsring::kernels {

const char* error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

} // namespace hsring::kernels
