#pragma once
// Deterministic random tensors for random-initialised models. The values depend only on
// (seed, tensor name, device type): a drafter process rebuilds exactly the frozen embedding and
// LM head of a random target without building its decoder layers, and a target restarted after
// a crash gets the same weights again.
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string_view>

namespace hsring::model {

// A fresh generator of `device`'s type seeded from (seed, name). CPU and CUDA generators draw
// different streams, so values match between processes on the same device type only.
at::Generator seeded_generator(std::uint64_t seed, std::string_view name, at::Device device);

// N(0, std^2) drawn in fp32 on `device` with seeded_generator(seed, name), then cast to dtype.
at::Tensor seeded_normal(std::uint64_t seed, std::string_view name, at::IntArrayRef shape, double std,
                         at::Device device, at::ScalarType dtype);

// A CPU generator seeded with `seed` (e.g. for anchor sampling).
at::Generator cpu_generator(std::uint64_t seed);

} // namespace hsring::model
