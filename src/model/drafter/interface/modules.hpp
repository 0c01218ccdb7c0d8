#pragma once
// The building blocks every drafter type's module is made of (parameters fp32 masters; the
// forward casts them to the compute dtype differentiably).
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

namespace hsring::model {

class RMSNormImpl : public torch::nn::Module {
public:
    RMSNormImpl(std::int64_t dim, double eps);
    at::Tensor forward(const at::Tensor& x) const;
    at::Tensor weight;
    double eps;
};
TORCH_MODULE(RMSNorm);

// A linear map without bias, y = x W^T: only its weight [out, in], made on `device` and left
// uninitialised (the drafter draws every weight itself, seeded). torch::nn::Linear would first fill
// it on the CPU with its own init: ~8 s for the 1 B parameters of a 5-layer drafter at Qwen3-8B
// dims, at every drafter start.
class ProjectionImpl : public torch::nn::Module {
public:
    ProjectionImpl(std::int64_t in, std::int64_t out, at::Device device);
    at::Tensor weight;
};
TORCH_MODULE(Projection);

// Every drafter's fresh weights: norms 1, every other parameter N(0, 0.02) drawn from (seed, its
// name), so a weight does not depend on the order modules are made in or on the device.
void init_drafter_weights(torch::nn::Module& module, std::uint64_t seed, at::Device device);

// bf16 on CUDA, fp32 elsewhere.
at::ScalarType default_compute_dtype(at::Device device);

} // namespace hsring::model
