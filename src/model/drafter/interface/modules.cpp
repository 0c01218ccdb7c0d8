#include "model/drafter/interface/modules.hpp"

#include "model/ops/ops.hpp"
#include "model/ops/tensor_init.hpp"

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

void init_drafter_weights(torch::nn::Module& module, std::uint64_t seed, at::Device device) {
    at::NoGradGuard no_grad;
    for (auto& p : module.named_parameters()) {
        if (p.key().ends_with("norm.weight")) p.value().fill_(1.0);
        else p.value().copy_(seeded_normal(seed, p.key(), p.value().sizes(), 0.02, device, at::kFloat));
    }
}

} // namespace hsring::model
