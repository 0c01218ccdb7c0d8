#pragma once
// The peer transport (CUDA IPC; see hsring/transport.hpp): a target keeps a few buffers on its
// GPU, exported once, and marks each batch complete with an interprocess event; drafters import
// the handles once per (target, incarnation) and pull one batch at a time device to device into
// their in-flight buffer. The decisions (which buffer is free, which imports are valid) are the
// CUDA-free peer_buffers.hpp and peer_imports.hpp; this file is the CUDA around them.
#include "transport/host.hpp"
#include "transport/peer_buffers.hpp"
#include "transport/peer_imports.hpp"
#include "transport/peer_ref.hpp"

#ifdef HSRING_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <optional>
#include <set>
#include <string>

namespace hsring::transport {

class PeerSlotWriter final : public SlotWriter {
public:
    // copies: Peer, or HostAndPeer (then every batch also goes into the host ring).
    // stop: the worker's stop flag (TransportOptions::stop), may be empty.
    // make_room: TransportOptions::make_room, may be empty.
    PeerSlotWriter(Ring& ring, Copies copies, std::uint32_t buffers, std::function<bool()> stop = {},
                   std::function<bool(WriteSlot&)> make_room = {});
    // Waits a little for readers to take this target's READY slots, hands the rest back to the ring
    // (peer-only: samples re-issued; peer+host: host copy only), leaves the owner table (readers
    // then distrust its copies) and only then frees the buffers.
    ~PeerSlotWriter() override;
    void begin(WriteSlot& slot, std::uint64_t n_tokens) override;
    void put_layer(std::uint32_t layer, const void* rows, GpuStream producer, KeepAlive keep) override;
    void finish() override;

private:
    Ring& ring_;
    Copies copies_;
    std::uint64_t row_bytes_, layer_stride_;
    PeerBuffers pool_;
    std::function<bool()> stop_;
    std::function<bool(WriteSlot&)> make_room_;
    std::vector<void*> memory_;
    std::vector<cudaEvent_t> events_;  // interprocess: one per buffer
    std::vector<PeerRef> refs_;
    std::unique_ptr<HostSlotWriter> host_;  // peer+host
    cudaStream_t stream_{};
    cudaEvent_t layer_ready_{};
    std::vector<KeepAlive> in_flight_;
    WriteSlot* slot_ = nullptr;
    std::uint32_t buffer_ = 0;
    std::uint64_t n_tokens_ = 0;
};

class PeerSlotReader final : public SlotReader {
public:
    PeerSlotReader(Ring& ring, Copies copies, const std::vector<int>& peer_devices);
    ~PeerSlotReader() override;
    bool receive(ReadSlot& slot, void* buffer) override;
    std::unique_ptr<StagedCopy> stage(ReadSlot slot, void* buffer) override;

private:
    // The slot's peer reference if its copy can be pulled now (a peer slot, holder alive, peer
    // access to its GPU); nullopt: read the host copy.
    std::optional<PeerRef> pullable(const ReadSlot& slot);
    const Imported& import(const ReadSlot& slot, const PeerRef& ref);
    HostSlotReader& host();

    Ring& ring_;
    Copies copies_;
    int device_ = 0;
    std::set<std::string> no_peer_access_;  // PCI bus ids of target GPUs this one cannot reach
    PeerImports imports_;
    std::unique_ptr<HostSlotReader> host_;  // peer+host; created on first use for "peer"
    cudaStream_t stream_{};
    cudaEvent_t done_{};
    struct Received {
        std::uint32_t slot = 0;
        std::uint64_t ticket = 0;
        void* buffer = nullptr;
        double ms = 0;
    };
    std::optional<Received> received_;  // "peer": pulled by receive(), released by stage()
};

} // namespace hsring::transport
#endif
