// Drafter side of the host ring: the filled rows of a slot go host -> device by DMA straight from
// the registered ring on a copy stream, and the slot goes back to FREE from a host callback the
// moment its copy completes (not when training on it ends). CPU: memcpy, then release.
#include "transport/done_copy.hpp"
#include "transport/host.hpp"

#include "hsring/cuda_util.hpp"
#include "hsring/error.hpp"
#include "hsring/log.hpp"

#include <chrono>

namespace hsring::transport {

namespace {

#ifdef HSRING_HAVE_CUDA
// The slot of a queued copy. The copy's completion callback holds one reference and releases the
// slot; the StagedCopy holds another. Whichever goes last frees it, so neither can dangle: a
// StagedCopy destroyed early (an exception, the end of training) leaves the callback a live slot.
struct PendingRelease {
    explicit PendingRelease(ReadSlot s) : slot(std::move(s)) {}
    ReadSlot slot;
};

void release_when_copied(void* p) {
    auto* owner = static_cast<std::shared_ptr<PendingRelease>*>(p);
    (*owner)->slot.release();  // no CUDA call in here (a host callback must not make any)
    delete owner;
}

class DmaCopy final : public StagedCopy {
public:
    DmaCopy() {
        HSRING_CUDA(cudaEventCreate(&start_));
        HSRING_CUDA(cudaEventCreate(&done_));
        HSRING_CUDA(cudaEventCreateWithFlags(&released_, cudaEventDisableTiming));
    }
    ~DmaCopy() override {
        // Destroying a recorded event whose work is pending is allowed: CUDA frees it later.
        cudaEventDestroy(start_);
        cudaEventDestroy(done_);
        cudaEventDestroy(released_);
    }
    void wait(GpuStream consumer) override {
        HSRING_CUDA(cudaStreamWaitEvent(consumer, done_, 0));  // compute after the copy (null: legacy default stream)
        HSRING_CUDA(cudaEventSynchronize(done_));
        float ms = 0;
        HSRING_CUDA(cudaEventElapsedTime(&ms, start_, done_));
        ms_ = ms;
        HSRING_CUDA(cudaEventSynchronize(released_));  // the callback ran: the slot is FREE again
        pending_.reset();
    }
    double copy_ms() const override { return ms_; }

    cudaEvent_t start_{}, done_{}, released_{};
    std::shared_ptr<PendingRelease> pending_;
    double ms_ = 0;
};
#endif

} // namespace

HostSlotReader::HostSlotReader(Ring& ring, bool cuda) : ring_(ring), cuda_(cuda) {
    if (!cuda_) return;
#ifdef HSRING_HAVE_CUDA
    registration_ = CudaRegistration::shared(ring_);
    stream_ = make_copy_stream();
#else
    fail("a GPU drafter needs the CUDA runtime: this hsring was built without it");
#endif
}

HostSlotReader::~HostSlotReader() {
#ifdef HSRING_HAVE_CUDA
    if (stream_) {
        cudaStreamSynchronize(stream_);  // every release callback has run before the ring can go
        cudaStreamDestroy(stream_);
        cudaGetLastError();
    }
#endif
}

std::unique_ptr<StagedCopy> HostSlotReader::stage(ReadSlot slot, void* buffer) {
    // Only the rows the batch fills, layer by layer: a slot is often far from full.
    const FilledRows rows = filled_rows(ring_.geometry(), slot.meta().n_tokens());
    const void* payload = slot.payload().data();
    if (!cuda_) {
        const auto t0 = std::chrono::steady_clock::now();
        copy_filled_rows(buffer, payload, rows);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        slot.release();
        return std::make_unique<DoneCopy>(ms);
    }
#ifdef HSRING_HAVE_CUDA
    auto copy = std::make_unique<DmaCopy>();
    HSRING_CUDA(cudaEventRecord(copy->start_, stream_));
    copy_filled_rows_async(buffer, payload, rows, stream_);
    HSRING_CUDA(cudaEventRecord(copy->done_, stream_));
    copy->pending_ = std::make_shared<PendingRelease>(std::move(slot));
    auto* owner = new std::shared_ptr<PendingRelease>(copy->pending_);
    const cudaError_t launched = cudaLaunchHostFunc(stream_, release_when_copied, owner);
    if (launched != cudaSuccess) delete owner;  // never queued: the slot goes back to READY with the copy
    HSRING_CUDA(launched);
    HSRING_CUDA(cudaEventRecord(copy->released_, stream_));
    return copy;
#else
    (void)buffer;
    return nullptr;
#endif
}

} // namespace hsring::transport
