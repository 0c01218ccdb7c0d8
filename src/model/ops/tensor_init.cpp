#include "model/ops/tensor_init.hpp"

#include "hsring/error.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <mutex>

namespace hsring::model {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

std::uint64_t fnv1a64(std::string_view s) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    return h;
}

} // namespace

at::Generator cpu_generator(std::uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

at::Generator seeded_generator(std::uint64_t seed, std::string_view name, at::Device device) {
    const std::uint64_t s = splitmix64(splitmix64(seed) ^ fnv1a64(name));
    if (device.is_cpu()) return cpu_generator(s);
    if (device.is_cuda()) {
        // Through the hooks: no CUDA headers needed, and it fails clearly without torch_cuda.
        at::Generator g = at::detail::getCUDAHooks().getNewGenerator(device.has_index() ? device.index() : 0);
        std::lock_guard<std::mutex> lock(g.mutex());
        g.set_current_seed(s);
        return g;
    }
    fail("random initialisation on device {} is not supported (use cpu or cuda)", device.str());
}

at::Tensor seeded_normal(std::uint64_t seed, std::string_view name, at::IntArrayRef shape, double std,
                         at::Device device, at::ScalarType dtype) {
    at::Generator g = seeded_generator(seed, name, device);
    at::Tensor t = at::empty(shape, at::TensorOptions().device(device).dtype(at::kFloat));
    t.normal_(0.0, std, g);
    return dtype == at::kFloat ? t : t.to(dtype);
}

} // namespace hsring::model
