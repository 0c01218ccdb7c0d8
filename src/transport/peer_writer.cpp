// Target side of the peer transport: each captured layer is copied device to device into a free
// buffer of this target's pool (exported once); the batch is complete when its interprocess
// event is. The commit waits for that event: a target killed mid-copy never leaves a READY slot
// whose bytes are incomplete, and no reader ever waits for work a dead process will not run.
#include "transport/peer.hpp"

#include "hsring/cuda_util.hpp"
#include "hsring/error.hpp"
#include "hsring/log.hpp"
#include "hsring/units.hpp"

#include <chrono>
#include <cstring>

namespace hsring::transport {

namespace {
constexpr auto kBufferWaitLog = std::chrono::seconds(10);
constexpr auto kDrainOnExit = std::chrono::seconds(10);
} // namespace

PeerSlotWriter::PeerSlotWriter(Ring& ring, Copies copies, std::uint32_t buffers, std::function<bool()> stop,
                               std::function<bool(WriteSlot&)> make_room)
    : ring_(ring), copies_(copies), row_bytes_(std::uint64_t{ring.geometry().hidden} * ring.geometry().dtype_bytes),
      layer_stride_(ring.geometry().slot_tokens * row_bytes_), pool_(buffers), stop_(std::move(stop)),
      make_room_(std::move(make_room)) {
    HSRING_ASSERT(copies != Copies::Host, "a peer writer makes peer copies");
    const std::uint64_t bytes = ring.geometry().n_layers * layer_stride_;
    int device = 0;
    HSRING_CUDA(cudaGetDevice(&device));
    char pci[16] = {};
    HSRING_CUDA(cudaDeviceGetPCIBusId(pci, sizeof pci, device));
    for (std::uint32_t b = 0; b < buffers; ++b) {
        void* p = nullptr;
        const cudaError_t err = cudaMalloc(&p, bytes);
        if (err != cudaSuccess) {
            cudaGetLastError();
            fail("[transport] peer_buffers = {}: cannot allocate buffer {} ({}) on GPU {}: {}: lower peer_buffers or "
                 "[ring] slot_tokens, or use kind = \"host\"", buffers, b, format_bytes(bytes), pci, cudaGetErrorString(err));
        }
        memory_.push_back(p);
        cudaEvent_t e{};
        HSRING_CUDA(cudaEventCreateWithFlags(&e, cudaEventInterprocess | cudaEventDisableTiming));
        events_.push_back(e);
        PeerRef ref;
        ref.buffer = b;
        ref.buffer_bytes = bytes;
        std::memcpy(ref.device, pci, sizeof ref.device);
        cudaIpcMemHandle_t mh{};
        cudaIpcEventHandle_t eh{};
        HSRING_CUDA(cudaIpcGetMemHandle(&mh, p));
        HSRING_CUDA(cudaIpcGetEventHandle(&eh, e));
        static_assert(sizeof mh == sizeof ref.memory && sizeof eh == sizeof ref.event);
        std::memcpy(ref.memory, &mh, sizeof mh);
        std::memcpy(ref.event, &eh, sizeof eh);
        refs_.push_back(ref);
    }
    if (copies == Copies::HostAndPeer) host_ = std::make_unique<HostSlotWriter>(ring, true);
    stream_ = make_copy_stream();
    HSRING_CUDA(cudaEventCreateWithFlags(&layer_ready_, cudaEventDisableTiming));
    log::info("peer transport ({}): {} buffers of {} exported on GPU {}", to_string(copies), buffers,
              format_bytes(bytes), pci);
}

PeerSlotWriter::~PeerSlotWriter() {
    if (stream_) cudaStreamSynchronize(stream_);
    // Readers may be pulling from our buffers: give them a moment to take what is READY.
    const auto end = std::chrono::steady_clock::now() + kDrainOnExit;
    while (pool_.busy(ring_) > 0 && std::chrono::steady_clock::now() < end) {
        const std::uint32_t seen = ring_.free_sequence();
        if (pool_.busy(ring_) == 0) break;
        ring_.wait_free(seen, std::chrono::milliseconds(100));
    }
    try {
        // What is still READY on our GPU goes back to the ring (peer-only: its samples are produced
        // again), then we leave: a reader checking us after its copy finds us gone and distrusts the
        // bytes. Only then may the buffers go.
        ring_.reclaim(ring_.self(), ring_.reclaim_hook());
        ring_.leave();
    } catch (const std::exception& e) {
        log::warn("peer transport: handing back this target's READY slots failed: {}", e.what());
    }
    for (auto e : events_) cudaEventDestroy(e);
    for (void* p : memory_) cudaFree(p);
    if (layer_ready_) cudaEventDestroy(layer_ready_);
    if (stream_) cudaStreamDestroy(stream_);
    cudaGetLastError();
}

void PeerSlotWriter::begin(WriteSlot& slot, std::uint64_t n_tokens) {
    (void)filled_rows(ring_.geometry(), n_tokens);  // throws when the batch does not fit
    // A buffer whose last batch no reader can still be copying. Only drafters free one: a stop
    // (the ring's, or this worker's SIGTERM) ends the wait, or it could last forever.
    const auto t0 = std::chrono::steady_clock::now();
    bool warned = false;
    std::optional<std::uint32_t> b;
    // Every buffer busy: the readers may need this batch first (a re-issued or rolled-back one
    // while the buffers hold later ones); then waiting would deadlock, and make_room_ gives a
    // later commit back. Asked again after each wait, as the readers' needs move.
    for (;;) {
        if ((b = pool_.find_free(ring_))) break;
        if (make_room_ && make_room_(slot) && (b = pool_.find_free(ring_))) break;
        if ((b = pool_.wait_free(ring_, std::chrono::milliseconds(1000), stop_))) break;
        if (ring_.stopping() || (stop_ && stop_()))
            throw WriteStopped(fmt::format("peer transport: stopped while all {} buffers held batches no drafter "
                                           "had pulled; this slot's samples are produced again", pool_.count()));
        if (!warned && std::chrono::steady_clock::now() - t0 > kBufferWaitLog) {
            log::warn("peer transport: all {} buffers still hold batches that no drafter has pulled for {} s "
                      "(drafters down?); waiting", pool_.count(), kBufferWaitLog.count());
            warned = true;
        }
    }
    slot_ = &slot;
    buffer_ = *b;
    n_tokens_ = n_tokens;
    if (host_) host_->begin(slot, n_tokens);
}

void PeerSlotWriter::put_layer(std::uint32_t layer, const void* rows, GpuStream producer, KeepAlive keep) {
    HSRING_ASSERT(slot_ && layer < ring_.geometry().n_layers, "put_layer({}) outside begin()/finish()", layer);
    if (host_) host_->put_layer(layer, rows, producer, keep);
    // Always (a null producer is the legacy default stream): see HostSlotWriter::put_layer.
    HSRING_CUDA(cudaEventRecord(layer_ready_, producer));
    HSRING_CUDA(cudaStreamWaitEvent(stream_, layer_ready_, 0));
    auto* dst = static_cast<std::byte*>(memory_[buffer_]) + layer * layer_stride_;
    HSRING_CUDA(cudaMemcpyAsync(dst, rows, n_tokens_ * row_bytes_, cudaMemcpyDeviceToDevice, stream_));
    in_flight_.push_back(std::move(keep));
}

void PeerSlotWriter::finish() {
    HSRING_ASSERT(slot_, "finish() without begin()");
    HSRING_CUDA(cudaEventRecord(events_[buffer_], stream_));  // readers' streams wait on it
    HSRING_CUDA(cudaEventSynchronize(events_[buffer_]));       // ... and it completed before the commit
    if (host_) host_->finish();
    in_flight_.clear();
    pool_.hold(buffer_, slot_->index(), slot_->ticket());
    write_peer_ref(slot_->meta(), refs_[buffer_]);
    slot_->set_copies(copies_);
    slot_ = nullptr;
}

} // namespace hsring::transport
