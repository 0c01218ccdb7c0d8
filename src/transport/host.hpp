#pragma once
// The host-ring transport (see hsring/transport.hpp): rows go device -> slot payload -> device
// through the registered shared memory, or by memcpy on the CPU.
#include "hsring/slot_rows.hpp"
#include "hsring/transport.hpp"

#ifdef HSRING_HAVE_CUDA
#include "transport/ring_cuda.hpp"

#include <cuda_runtime_api.h>
#endif

#include <memory>
#include <vector>

namespace hsring::transport {

#ifdef HSRING_HAVE_CUDA
// A stream of the current device for copies: non-blocking (never waits for the legacy default
// stream) and of the highest priority, so copies are not queued behind compute kernels.
cudaStream_t make_copy_stream();
#endif

class HostSlotWriter final : public SlotWriter {
public:
    HostSlotWriter(Ring& ring, bool cuda);
    ~HostSlotWriter() override;
    void begin(WriteSlot& slot, std::uint64_t n_tokens) override;
    void put_layer(std::uint32_t layer, const void* rows, GpuStream producer, KeepAlive keep) override;
    void finish() override;

private:
    Ring& ring_;
    bool cuda_;
    std::uint64_t row_bytes_, layer_stride_;
    std::byte* payload_ = nullptr;
    std::uint64_t n_tokens_ = 0;
#ifdef HSRING_HAVE_CUDA
    std::shared_ptr<CudaRegistration> registration_;  // shared with this process's other users of the ring
    cudaStream_t stream_{};
    cudaEvent_t layer_ready_{};
    std::vector<KeepAlive> in_flight_;  // sources of queued copies: alive until finish()
#endif
};

class HostSlotReader final : public SlotReader {
public:
    HostSlotReader(Ring& ring, bool cuda);
    ~HostSlotReader() override;  // waits for queued copies: no release callback outlives the ring
    std::unique_ptr<StagedCopy> stage(ReadSlot slot, void* buffer) override;

private:
    Ring& ring_;
    bool cuda_;
#ifdef HSRING_HAVE_CUDA
    std::shared_ptr<CudaRegistration> registration_;  // shared with this process's other users of the ring
    cudaStream_t stream_{};
#endif
};

} // namespace hsring::transport
