#pragma once
// Calling src/kernels from ATen code: what a launch needs from a tensor (the kernels' dtype, the
// current stream of its device) and one error message for a failed launch. Only in builds with
// src/kernels and c10_cuda (HSRING_KERNELS_ON); the callers keep an ATen path for the others.
#if HSRING_HAVE_KERNELS && HSRING_HAVE_C10_CUDA
#define HSRING_KERNELS_ON 1
#include "hsring/error.hpp"
#include "kernels/kernel_types.hpp"

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAStream.h>

namespace hsring::model::kernel_call {

// Whether the kernels take tensors of this dtype.
inline bool supported(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }

inline kernels::Dtype dtype(at::ScalarType t) {
    HSRING_ASSERT(supported(t), "src/kernels: dtype {} not supported", c10::toString(t));
    return t == at::kFloat ? kernels::Dtype::Float32 : t == at::kHalf ? kernels::Dtype::Float16 : kernels::Dtype::BFloat16;
}

inline void* stream(const at::Tensor& on) { return c10::cuda::getCurrentCUDAStream(on.device().index()).stream(); }

// st: what a launcher returned; what: the kernel and its shape, for the message. An error pending
// from earlier work is said to be that, not this kernel's failure.
template <typename... Args> void check(kernels::LaunchStatus st, fmt::format_string<Args...> what, Args&&... args) {
    if (st.ok()) return;
    const std::string kernel = fmt::format(what, std::forward<Args>(args)...);
    if (st.earlier)
        fail("{}: not launched: a CUDA error of earlier work was pending on this device (not this kernel's; "
             "CUDA_LAUNCH_BLOCKING=1 shows where it arose): {}", kernel, kernels::error_string(st.error));
    fail("{}: {}", kernel, kernels::error_string(st.error));
}

} // namespace hsring::model::kernel_call
#else
#define HSRING_KERNELS_ON 0
#endif
