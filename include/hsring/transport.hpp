#pragma once
// The transport: every copy of hidden states on the data path (invariants 1 and 2, docs/architecture.md).
// The compute classes only hand buffers over: a SlotWriter gets a batch's captured layer rows
// into a claimed slot, a SlotReader stages an acquired slot into one of the drafter's in-flight
// buffers and releases the slot as soon as that copy completed.
//
//   target:   claim -> begin(slot, n) -> put_layer(0..L-1, rows) -> finish() -> commit
//   drafter:  acquire -> receive(slot) -> consume the samples -> stage(slot, buffer) -> wait(compute stream)
//
// Kinds ([transport] kind, src/transport/README.md):
//   host       a GPU worker DMAs device <-> slot payload straight from/to the registered shared
//              memory on a copy stream of its own; a CPU worker copies with memcpy.
//   peer       the target copies the rows into one of a few buffers on its own GPU (exported once
//              with cudaIpcGetMemHandle, with an interprocess event marking the batch complete);
//              the ring carries the control word and the metadata, READY names the target
//              (Copies::Peer), and the drafter pulls the rows device to device before any sample
//              of the slot is consumed (receive()). A target that dies takes its READY slots'
//              bytes along: the ring's reclaim re-issues their samples.
//   peer+host  both copies: the drafter pulls from the peer while its target lives, else from the
//              host payload (Copies::HostAndPeer).
// Buffers are layer-major like the payload ([n_layers][slot_tokens][hidden] of the ring dtype);
// only the rows a batch fills are copied (hsring/slot_rows.hpp).
//
// Thread-safety: a writer or reader belongs to one thread. A StagedCopy may be destroyed before
// its copy completed: the slot is still released when it does (the copy's completion owns it).
#include "hsring/config.hpp"
#include "hsring/ring.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <vector>

struct CUstream_st;

namespace hsring::transport {

// A CUDA stream (the same type as cudaStream_t) without the CUDA headers. On a GPU worker nullptr
// is CUDA's legacy default stream (torch's default stream), a stream to wait for like any other,
// never "nothing to wait for"; a CPU worker's transport ignores it.
using GpuStream = CUstream_st*;

// Keeps the source of a copy alive until the copy completed (a tensor, type-erased).
using KeepAlive = std::shared_ptr<const void>;

// What begin() throws when it was stopped while it waited for room for the batch (a peer writer
// whose buffers all hold batches no drafter has taken, when the ring is stopping or the worker's
// stop flag is set): the caller re-issues the slot's samples and aborts the slot, as for a failed
// write, and stops instead of treating it as a failure.
class WriteStopped : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class SlotWriter {
public:
    virtual ~SlotWriter() = default;
    // Starts a batch of n_tokens rows per layer in `slot` (claimed by the caller, who commits it
    // after finish()). Throws hsring::Error when n_tokens exceeds the slot, WriteStopped when it was
    // stopped while waiting for room.
    virtual void begin(WriteSlot& slot, std::uint64_t n_tokens) = 0;
    // Layer `layer`'s rows ([n_tokens][hidden] of the ring dtype, contiguous) at `rows`: device
    // memory on a GPU worker, host memory on the CPU. They are ready once the work queued on
    // `producer` so far is done (see GpuStream); the copy overlaps the producer's later work,
    // and `keep` is held until the copy completed.
    virtual void put_layer(std::uint32_t layer, const void* rows, GpuStream producer, KeepAlive keep) = 0;
    // Returns when every byte of the batch is where readers will look for it.
    virtual void finish() = 0;
};

// A batch on its way into an in-flight buffer.
class StagedCopy {
public:
    virtual ~StagedCopy() = default;
    // Work queued on `consumer` after this call runs after the copy; returns once the copy
    // completed and its slot was released.
    virtual void wait(GpuStream consumer) = 0;
    // How long the copy took, in milliseconds (valid after wait()).
    virtual double copy_ms() const = 0;
};

class SlotReader {
public:
    virtual ~SlotReader() = default;
    // Called before any sample of `slot` is consumed, with the buffer stage() will get. True: go
    // on. False: the slot's bytes are gone (they lived only on a writer that died): the slot was
    // freed and its samples re-issued; take the next slot. The host ring always says true.
    virtual bool receive(ReadSlot& slot, void* buffer) {
        (void)slot;
        (void)buffer;
        return true;
    }
    // Copies the slot's filled rows into `buffer` (device memory on a GPU worker, host memory on
    // the CPU; the payload's layout) and releases the slot as soon as the copy completed.
    virtual std::unique_ptr<StagedCopy> stage(ReadSlot slot, void* buffer) = 0;
};

struct TransportOptions {
    bool cuda = false;  // a GPU worker (its device is the current one): DMA; else memcpy
    TransportKind kind = TransportKind::Host;
    std::uint32_t peer_buffers = 2;  // writer, peer kinds: device buffers of one slot payload each
    // Writer, peer kinds: the worker's stop flag (SIGTERM); with the ring's stopping flag it ends a
    // wait for a free buffer (begin() throws WriteStopped). Empty: the ring's flag only.
    std::function<bool()> stop;
    // Writer, peer kinds: called while every buffer holds a batch no reader has pulled, with the
    // slot being written. The readers may need that batch before the ones the buffers hold (they
    // train in an order of their own, and a kill re-issues an earlier batch): then the hook gives
    // one of this writer's READY commits back to the ring (FREE, its samples re-issued), which
    // frees its buffer, and returns true. Empty, or false: wait for the readers.
    std::function<bool(WriteSlot& writing)> make_room;
    // Reader, peer kinds: this process's device ordinals of the targets' GPUs, whose peer access
    // is checked at start (without it: "peer" fails, "peer+host" reads those targets' host copies).
    std::vector<int> peer_devices;
};

// The transport of a worker. A GPU worker of a host kind registers the ring's payload with CUDA
// here (once per process); a peer writer allocates and exports its buffers. Throws hsring::Error
// (registration failed, no peer access for "peer", CUDA asked for in a build without it).
std::unique_ptr<SlotWriter> make_slot_writer(Ring& ring, const TransportOptions& opts);
std::unique_ptr<SlotReader> make_slot_reader(Ring& ring, const TransportOptions& opts);

// A worker's options from its config ([transport]) and place; a reader's peer devices follow
// from CUDA_VISIBLE_DEVICES as prepare_drafter_devices() left it.
TransportOptions options_for(const Config& cfg, bool cuda);
// Call before anything starts CUDA in a drafter: for a peer kind on a GPU, CUDA_VISIBLE_DEVICES
// becomes its own GPU (still device 0) followed by its targets' GPUs, so that peer access to them
// can be checked and enabled. Other workers and kinds: nothing changes.
void prepare_drafter_devices(const Config& cfg, bool cuda);

} // namespace hsring::transport
