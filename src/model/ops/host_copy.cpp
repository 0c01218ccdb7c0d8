#include "model/ops/host_copy.hpp"

#include "hsring/error.hpp"

#include <ATen/ATen.h>

namespace hsring::model {

at::Tensor host_to_device(const at::Tensor& host, at::Device device) {
    HSRING_ASSERT(host.is_cpu(), "host_to_device: a CPU tensor");
    if (!device.is_cuda()) return host.to(device);
    at::Tensor pinned = at::empty(host.sizes(), host.options().pinned_memory(true));
    pinned.copy_(host);
    return pinned.to(device, /*non_blocking=*/true);
}

at::Tensor longs_to_device(const std::vector<std::int64_t>& v, at::Device device) {
    return host_to_device(at::tensor(v, at::kLong), device);
}

at::Tensor ints_to_device(const std::vector<std::int32_t>& v, at::Device device) {
    return host_to_device(at::tensor(v, at::kInt), device);
}

} // namespace hsring::model
