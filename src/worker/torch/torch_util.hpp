#pragma once
// Small glue between the worker and LibTorch: devices and dtypes from the config, and the CUDA
// streams/events a worker uses (only where torch_cuda is linked: HSRING_TORCH_CUDA).
#include "hsring/config.hpp"
#include "hsring/transport.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <memory>

namespace hsring::worker {

at::ScalarType scalar_type(DType t);
// cuda:0 (CUDA_VISIBLE_DEVICES holds the worker's GPU) or the CPU; throws hsring::Error when
// CUDA is asked for but this build or machine cannot provide it.
at::Device worker_device(bool cuda);
// CPU workers share the machine's cores: each gets cores / (CPU-placed workers of the run)
// intra-op threads (at least 1), unless OMP_NUM_THREADS says otherwise. Oversubscribed
// threads on a small machine cost more than they give.
void configure_cpu_threads(const Config& cfg);
// The current CUDA stream of `d` (the one torch queues compute on), nullptr on the CPU: what the
// transport's copies wait for and what waits for them.
transport::GpuStream current_stream(const at::Device& d);
// Peak device memory allocated by this process so far (0 on CPU).
std::uint64_t device_peak_bytes(const at::Device& d);

// Time of the work queued on a device's current stream between start() and stop(), on the device's
// clock (CUDA events); the host's clock on the CPU. seconds() waits for stop()'s event.
class DeviceTimer {
public:
    explicit DeviceTimer(const at::Device& d);
    ~DeviceTimer();
    DeviceTimer(const DeviceTimer&) = delete;
    DeviceTimer& operator=(const DeviceTimer&) = delete;
    void start();
    void stop();
    double seconds();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace hsring::worker
