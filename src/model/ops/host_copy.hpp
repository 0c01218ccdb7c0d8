#pragma once
// Small host data (offsets, indices, positions) onto the compute device without a wait. A copy
// from pageable memory returns only once the stream has run it, after all work queued before it:
// the drafter's step preparation waited there for the previous optimizer step, and its next copies
// each waited for the few kernels queued since (the H200 trace of issue 23, BENCHMARKS.md). On a
// CUDA device the data is staged in pinned memory and copied asynchronously; torch's caching host
// allocator keeps the pinned buffer until the copy has run.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace hsring::model {

// `host` (a CPU tensor) on `device`: a copy queued on the device's current stream (CUDA), or
// host.to(device) elsewhere.
at::Tensor host_to_device(const at::Tensor& host, at::Device device);

// A host vector as an int64 / int32 tensor on `device`, the same way.
at::Tensor longs_to_device(const std::vector<std::int64_t>& v, at::Device device);
at::Tensor ints_to_device(const std::vector<std::int32_t>& v, at::Device device);

} // namespace hsring::model
