#include "model/drafter/interface/modules.hpp"

#include "model/ops/ops.hpp"

#include <ATen/ATen.h>

namespace hsring::model {

at::ScalarType default_compute_dtype(at::Device device) { return device.is_cuda() ? at::kBFloat16 : at::kFloat; }

RMSNormImpl::RMSNormImpl(std::int64_t dim, double eps_) : eps(eps_) {
    weight = register_parameter("weight", at::ones({dim}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) const { return rms_norm(x, weight, eps); }

ProjectionImpl::ProjectionImpl(std::int64_t in, std::int64_t out, at::Device device) {
    weight = register_parameter("weight", at::empty({out, in}, at::TensorOptions().dtype(at::kFloat).device(device)));
}

} // namespace hsring::model
