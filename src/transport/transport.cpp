// Which transport a worker gets (hsring/transport.hpp).
#include "hsring/transport.hpp"

#include "hsring/cuda_util.hpp"
#include "hsring/error.hpp"
#include "hsring/worker_contract.hpp"
#include "transport/host.hpp"
#include "transport/peer.hpp"
#include "transport/visible_devices.hpp"

#include <cstdlib>

namespace hsring::transport {

#ifdef HSRING_HAVE_CUDA
cudaStream_t make_copy_stream() {
    int least = 0, greatest = 0;
    HSRING_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t s{};
    HSRING_CUDA(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
    return s;
}
#endif

namespace {
Copies copies_of(TransportKind k) {
    return k == TransportKind::Peer ? Copies::Peer : k == TransportKind::PeerAndHost ? Copies::HostAndPeer : Copies::Host;
}
void require_gpu(const TransportOptions& opts) {
    if (!opts.cuda)
        fail("[transport] kind = \"{}\" copies between GPUs: this worker is on the CPU (use kind = \"host\")",
             to_string(opts.kind));
#ifndef HSRING_HAVE_CUDA
    fail("[transport] kind = \"{}\" needs the CUDA runtime: this hsring was built without it", to_string(opts.kind));
#endif
}
} // namespace

std::unique_ptr<SlotWriter> make_slot_writer(Ring& ring, const TransportOptions& opts) {
    if (opts.kind == TransportKind::Host) return std::make_unique<HostSlotWriter>(ring, opts.cuda);
    require_gpu(opts);
#ifdef HSRING_HAVE_CUDA
    return std::make_unique<PeerSlotWriter>(ring, copies_of(opts.kind), opts.peer_buffers, opts.stop,
                                            opts.make_room);
#else
    return nullptr;
#endif
}

std::unique_ptr<SlotReader> make_slot_reader(Ring& ring, const TransportOptions& opts) {
    if (opts.kind == TransportKind::Host) return std::make_unique<HostSlotReader>(ring, opts.cuda);
    require_gpu(opts);
#ifdef HSRING_HAVE_CUDA
    return std::make_unique<PeerSlotReader>(ring, copies_of(opts.kind), opts.peer_devices);
#else
    return nullptr;
#endif
}

TransportOptions options_for(const Config& cfg, bool cuda) {
    TransportOptions o;
    o.cuda = cuda;
    o.kind = cfg.transport.kind;
    o.peer_buffers = cfg.transport.peer_buffers;
    const char* visible = std::getenv(env::kCudaVisibleDevices);
    if (cuda && o.kind != TransportKind::Host) o.peer_devices = peer_ordinals(visible ? visible : "", cfg.topology.targets);
    return o;
}

void prepare_drafter_devices(const Config& cfg, bool cuda) {
    if (!cuda || cfg.transport.kind == TransportKind::Host) return;
    const char* visible = std::getenv(env::kCudaVisibleDevices);
    if (!visible || !*visible) return;  // every GPU is visible already
    const std::string wide = widen_visible_devices(visible, cfg.topology.targets);
    ::setenv(env::kCudaVisibleDevices, wide.c_str(), 1);
}

} // namespace hsring::transport
