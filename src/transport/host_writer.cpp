// Target side of the host ring: each captured layer goes straight into the claimed slot, on the
// GPU by an async D2H copy into the registered ring on a copy stream that waits for that layer
// only (so copies overlap the later layers' compute), on the CPU by memcpy. No staging buffer
// (invariant 2, docs/architecture.md).
#include "transport/host.hpp"

#include "hsring/cuda_util.hpp"
#include "hsring/error.hpp"
#include "hsring/log.hpp"

#include <cstring>

namespace hsring::transport {

HostSlotWriter::HostSlotWriter(Ring& ring, bool cuda)
    : ring_(ring), cuda_(cuda), row_bytes_(std::uint64_t{ring.geometry().hidden} * ring.geometry().dtype_bytes),
      layer_stride_(ring.geometry().slot_tokens * row_bytes_) {
    if (!cuda_) return;
#ifdef HSRING_HAVE_CUDA
    registration_ = CudaRegistration::shared(ring_);
    stream_ = make_copy_stream();
    HSRING_CUDA(cudaEventCreateWithFlags(&layer_ready_, cudaEventDisableTiming));
#else
    fail("a GPU target needs the CUDA runtime: this hsring was built without it");
#endif
}

HostSlotWriter::~HostSlotWriter() {
#ifdef HSRING_HAVE_CUDA
    if (stream_) {
        cudaStreamSynchronize(stream_);
        cudaStreamDestroy(stream_);
    }
    if (layer_ready_) cudaEventDestroy(layer_ready_);
    cudaGetLastError();
#endif
}

void HostSlotWriter::begin(WriteSlot& slot, std::uint64_t n_tokens) {
    (void)filled_rows(ring_.geometry(), n_tokens);  // throws when the batch does not fit
    payload_ = slot.payload().data();
    n_tokens_ = n_tokens;
}

void HostSlotWriter::put_layer(std::uint32_t layer, const void* rows, GpuStream producer, KeepAlive keep) {
    HSRING_ASSERT(payload_ && layer < ring_.geometry().n_layers, "put_layer({}) outside begin()/finish()", layer);
    std::byte* dst = payload_ + layer * layer_stride_;
    const std::uint64_t bytes = n_tokens_ * row_bytes_;
    if (!cuda_) {
        std::memcpy(dst, rows, bytes);
        return;
    }
#ifdef HSRING_HAVE_CUDA
    // The copy stream waits for this layer only (a wait captures the event's latest record, so
    // one event serves every layer). Always: a null producer is CUDA's legacy default stream,
    // torch's default stream, and our copy stream is non-blocking, so without the wait the copy
    // read the layer's memory before the forward wrote it (issue 20: stale rows, NaN after a restart).
    HSRING_CUDA(cudaEventRecord(layer_ready_, producer));
    HSRING_CUDA(cudaStreamWaitEvent(stream_, layer_ready_, 0));
    HSRING_CUDA(cudaMemcpyAsync(dst, rows, bytes, cudaMemcpyDeviceToHost, stream_));
    in_flight_.push_back(std::move(keep));
#else
    (void)producer;
    (void)keep;
#endif
}

void HostSlotWriter::finish() {
#ifdef HSRING_HAVE_CUDA
    if (cuda_) {
        HSRING_CUDA(cudaStreamSynchronize(stream_));  // every byte is in the slot before the commit
        in_flight_.clear();
    }
#endif
    payload_ = nullptr;
}

} // namespace hsring::transport
