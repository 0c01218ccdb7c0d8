#pragma once
// Small glue between the worker and LibTorch: devices and dtypes from the config, and the CUDA
// streams/events a worker uses (only where torch_cuda is linked: HSRING_TORCH_CUDA).
#include "hsring/config.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace hsring::worker {

at::ScalarType scalar_type(DType t);
// cuda:0 (CUDA_VISIBLE_DEVICES holds the worker's GPU) or the CPU; throws hsring::Error when
// CUDA is asked for but this build or machine cannot provide it.
at::Device worker_device(bool cuda);
// Peak device memory allocated by this process so far (0 on CPU).
std::uint64_t device_peak_bytes(const at::Device& d);

} // namespace hsring::worker
