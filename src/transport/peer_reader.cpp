// Drafter side of the peer transport. A peer copy is trusted only if its holder (the target
// incarnation named by READY) is still alive after the copy completed: a live holder never
// overwrites or frees a buffer whose slot a reader holds (peer_buffers.hpp), so its bytes were
// intact throughout. Otherwise:
//   "peer":      receive() pulls before any sample is consumed, and discards a slot whose holder
//                died (samples re-issued, slot FREE): nothing consumed is ever lost.
//   "peer+host": stage() pulls asynchronously; if the holder died, wait() copies the host payload
//                instead. Targets whose GPU this one cannot reach are read from the host.
#include "transport/done_copy.hpp"
#include "transport/peer.hpp"

#include "hsring/cuda_util.hpp"
#include "hsring/error.hpp"
#include "hsring/log.hpp"

#include <chrono>
#include <cstring>

namespace hsring::transport {

namespace {

// The slot of an asynchronous peer pull ("peer+host"). Its completion callback checks the holder:
// alive -> releases the slot; dead -> leaves it to wait(), which reads the host copy. The callback
// shares ownership, so a PeerCopy destroyed early leaves it no dangling pointer.
struct PendingPull {
    PendingPull(ReadSlot s, Ring& r) : slot(std::move(s)), ring(r), holder(slot.holder()) {}
    ReadSlot slot;
    Ring& ring;
    Owner holder;
    bool host_needed = false;  // written by the callback, read after `checked_` completed
};

void check_after_pull(void* p) {
    auto* owner = static_cast<std::shared_ptr<PendingPull>*>(p);
    PendingPull& pull = **owner;
    // No CUDA call in a host callback: the ring and /proc only.
    if (pull.ring.owner_alive(pull.holder)) pull.slot.release();
    else pull.host_needed = true;
    delete owner;
}

class PeerCopy final : public StagedCopy {
public:
    PeerCopy(HostSlotReader& host, void* buffer, cudaStream_t stream) : host_(host), buffer_(buffer), stream_(stream) {
        HSRING_CUDA(cudaEventCreate(&start_));
        HSRING_CUDA(cudaEventCreate(&done_));
        HSRING_CUDA(cudaEventCreateWithFlags(&checked_, cudaEventDisableTiming));
    }
    ~PeerCopy() override {
        cudaEventDestroy(start_);
        cudaEventDestroy(done_);
        cudaEventDestroy(checked_);
    }
    void wait(GpuStream consumer) override {
        HSRING_CUDA(cudaEventSynchronize(done_));
        float ms = 0;
        HSRING_CUDA(cudaEventElapsedTime(&ms, start_, done_));
        ms_ = ms;
        HSRING_CUDA(cudaEventSynchronize(checked_));  // the callback ran
        if (pending_->host_needed) {
            // The holder died during the pull: its bytes are suspect, the host copy is not.
            log::warn("slot ticket {}: its target (pid {}) died while its peer copy was pulled; read the host copy",
                      pending_->slot.ticket(), pending_->holder.pid);
            auto again = host_.stage(std::move(pending_->slot), buffer_);
            again->wait(consumer);
            ms_ += again->copy_ms();
        } else {  // a null consumer is the legacy default stream, a stream like any other
            HSRING_CUDA(cudaStreamWaitEvent(consumer, done_, 0));
        }
        pending_.reset();
    }
    double copy_ms() const override { return ms_; }

    HostSlotReader& host_;
    void* buffer_;
    cudaStream_t stream_;
    cudaEvent_t start_{}, done_{}, checked_{};
    std::shared_ptr<PendingPull> pending_;
    double ms_ = 0;
};

Imported open_imports(const PeerRef& ref) {
    cudaIpcMemHandle_t mh{};
    cudaIpcEventHandle_t eh{};
    std::memcpy(&mh, ref.memory, sizeof mh);
    std::memcpy(&eh, ref.event, sizeof eh);
    Imported imp;
    cudaError_t err = cudaIpcOpenMemHandle(&imp.memory, mh, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
        cudaGetLastError();
        fail("cudaIpcOpenMemHandle of buffer {} on GPU {}: {}: {}", ref.buffer, ref.device, cudaGetErrorName(err),
             cudaGetErrorString(err));
    }
    cudaEvent_t e{};
    err = cudaIpcOpenEventHandle(&e, eh);
    if (err != cudaSuccess) {
        cudaGetLastError();
        cudaIpcCloseMemHandle(imp.memory);
        fail("cudaIpcOpenEventHandle of buffer {} on GPU {}: {}: {}", ref.buffer, ref.device, cudaGetErrorName(err),
             cudaGetErrorString(err));
    }
    imp.event = e;
    return imp;
}

void close_imports(const Imported& imp) {
    // The exporter may be gone: errors here only say so.
    if (imp.event) cudaEventDestroy(static_cast<cudaEvent_t>(imp.event));
    if (imp.memory) cudaIpcCloseMemHandle(imp.memory);
    cudaGetLastError();
}

} // namespace

PeerSlotReader::PeerSlotReader(Ring& ring, Copies copies, const std::vector<int>& peer_devices)
    : ring_(ring), copies_(copies),
      imports_({open_imports, [this](const Imported& imp) {
                    // No copy queued from a mapping may still be running when it goes.
                    if (stream_) cudaStreamSynchronize(stream_);
                    close_imports(imp);
                }}) {
    HSRING_ASSERT(copies != Copies::Host, "a peer reader reads peer copies");
    HSRING_CUDA(cudaGetDevice(&device_));
    char self[16] = {};
    HSRING_CUDA(cudaDeviceGetPCIBusId(self, sizeof self, device_));
    // Peer access to every target GPU, checked now rather than at the first slot.
    for (int d : peer_devices) {
        if (d == device_) continue;
        char pci[16] = {};
        HSRING_CUDA(cudaDeviceGetPCIBusId(pci, sizeof pci, d));
        int can = 0;
        HSRING_CUDA(cudaDeviceCanAccessPeer(&can, device_, d));
        if (!can) {
            if (copies == Copies::Peer)
                fail("[transport] kind = \"peer\": this drafter's GPU ({}) has no peer access to target GPU {} "
                     "(cudaDeviceCanAccessPeer; `nvidia-smi topo -p2p r` shows the machine's pairs): use kind = "
                     "\"peer+host\" (it reads such targets through the host ring) or \"host\"", self, pci);
            log::warn("[transport] kind = \"peer+host\": no peer access from GPU {} to target GPU {}: its batches come "
                      "through the host ring", self, pci);
            no_peer_access_.insert(pci);
            continue;
        }
        const cudaError_t err = cudaDeviceEnablePeerAccess(d, 0);
        if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled)
            fail("cudaDeviceEnablePeerAccess from GPU {} to GPU {}: {}: {}", self, pci, cudaGetErrorName(err),
                 cudaGetErrorString(err));
        cudaGetLastError();
    }
    if (copies == Copies::HostAndPeer) host_ = std::make_unique<HostSlotReader>(ring, true);
    stream_ = make_copy_stream();
    HSRING_CUDA(cudaEventCreate(&done_));
    log::info("peer transport ({}) on GPU {}: peer access to {} of {} target GPUs", to_string(copies), self,
              peer_devices.size() - no_peer_access_.size(), peer_devices.size());
}

PeerSlotReader::~PeerSlotReader() {
    if (stream_) {
        cudaStreamSynchronize(stream_);  // every callback has run before the ring can go
        cudaStreamDestroy(stream_);
        stream_ = nullptr;  // (imports_ closes its handles after this body)
    }
    if (done_) cudaEventDestroy(done_);
    cudaGetLastError();
}

HostSlotReader& PeerSlotReader::host() {
    if (!host_) {
        // "peer" meets a host slot only when the ring outlived a run of another kind.
        log::warn("a slot with a host copy in a \"peer\" run (left from a run of another [transport] kind?): "
                  "registering the ring to read it");
        host_ = std::make_unique<HostSlotReader>(ring_, true);
    }
    return *host_;
}

std::optional<PeerRef> PeerSlotReader::pullable(const ReadSlot& slot) {
    // Imports of targets that died or restarted are closed before anything else is pulled.
    imports_.sweep([&](Owner o) { return ring_.owner_alive(o); });
    if (slot.copies() == Copies::Host) return std::nullopt;
    auto ref = read_peer_ref(slot.meta());
    if (!ref) fail("slot ticket {}: READY with a peer copy but no peer reference in its metadata: a damaged ring; "
                   "remove it (hsring ring rm) and start again", slot.ticket());
    if (no_peer_access_.count(ref->device) || !ring_.owner_alive(slot.holder())) return std::nullopt;
    return ref;
}

const Imported& PeerSlotReader::import(const ReadSlot& slot, const PeerRef& ref) {
    return imports_.get(slot.meta().writer_rank(), slot.holder(), ref);
}

bool PeerSlotReader::receive(ReadSlot& slot, void* buffer) {
    received_.reset();
    if (copies_ != Copies::Peer || slot.copies() == Copies::Host) return true;  // stage() copies
    const auto ref = pullable(slot);
    if (!ref) {
        if (ring_.owner_alive(slot.holder()))
            fail("slot ticket {}: its only copy is on GPU {}, which this drafter cannot reach", slot.ticket(),
                 read_peer_ref(slot.meta())->device);
        slot.discard();  // its target is gone, and its bytes with it: the samples are produced again
        return false;
    }
    // Pulled now and checked before any sample is consumed.
    const FilledRows rows = filled_rows(ring_.geometry(), slot.meta().n_tokens());
    const auto t0 = std::chrono::steady_clock::now();
    try {
        const Imported& imp = import(slot, *ref);
        HSRING_CUDA(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(imp.event), 0));
        copy_filled_rows_async(buffer, imp.memory, rows, stream_, cudaMemcpyDeviceToDevice);
        HSRING_CUDA(cudaEventRecord(done_, stream_));
        HSRING_CUDA(cudaEventSynchronize(done_));
    } catch (const Error& e) {
        if (ring_.owner_alive(slot.holder())) throw;  // not a death: a real failure
        log::warn("slot ticket {}: its target (pid {}) died while its peer copy was pulled ({})", slot.ticket(),
                  slot.holder().pid, e.what());
    }
    if (!ring_.owner_alive(slot.holder())) {
        log::info("slot ticket {}: its target (pid {}) is gone: the slot is freed and its samples produced again",
                  slot.ticket(), slot.holder().pid);
        slot.discard();
        return false;
    }
    received_ = Received{slot.index(), slot.ticket(), buffer,
                         std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()};
    return true;
}

std::unique_ptr<StagedCopy> PeerSlotReader::stage(ReadSlot slot, void* buffer) {
    if (received_ && received_->slot == slot.index() && received_->ticket == slot.ticket() && received_->buffer == buffer) {
        const double ms = received_->ms;
        received_.reset();
        slot.release();  // the bytes are in the buffer since receive()
        return std::make_unique<DoneCopy>(ms);
    }
    received_.reset();
    const auto ref = pullable(slot);
    if (!ref) {
        if (slot.copies() == Copies::Peer) {
            // Only receive() may drop a peer-only slot (before its samples are consumed).
            fail("slot ticket {}: staged without receive() while its only copy is unreachable (a bug)", slot.ticket());
        }
        return host().stage(std::move(slot), buffer);
    }
    // "peer+host": an asynchronous pull; the callback releases the slot if its holder outlived it.
    const FilledRows rows = filled_rows(ring_.geometry(), slot.meta().n_tokens());
    const Imported& imp = import(slot, *ref);
    auto copy = std::make_unique<PeerCopy>(host(), buffer, stream_);
    HSRING_CUDA(cudaEventRecord(copy->start_, stream_));
    HSRING_CUDA(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(imp.event), 0));
    copy_filled_rows_async(buffer, imp.memory, rows, stream_, cudaMemcpyDeviceToDevice);
    HSRING_CUDA(cudaEventRecord(copy->done_, stream_));
    copy->pending_ = std::make_shared<PendingPull>(std::move(slot), ring_);
    auto* owner = new std::shared_ptr<PendingPull>(copy->pending_);
    const cudaError_t launched = cudaLaunchHostFunc(stream_, check_after_pull, owner);
    if (launched != cudaSuccess) delete owner;
    HSRING_CUDA(launched);
    HSRING_CUDA(cudaEventRecord(copy->checked_, stream_));
    return copy;
}

} // namespace hsring::transport
