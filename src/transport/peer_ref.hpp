#pragma once
// Where a peer copy is: the writer's transport puts it into the slot's transport words between
// claim and commit (published by the commit like the rest of the metadata). The handles are the
// raw bytes of cudaIpcMemHandle_t / cudaIpcEventHandle_t (64 bytes each), so this file and the
// code that decides which imports are valid need no CUDA.
#include "hsring/ring.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>

namespace hsring::transport {

struct PeerRef {
    static constexpr std::uint32_t kMagic = 0x52454550;  // "PEER"
    std::uint32_t magic = kMagic;
    std::uint32_t buffer = 0;         // index in the writer's buffer pool
    std::uint64_t buffer_bytes = 0;   // its size (the slot payload's)
    char device[16] = {};             // the writer GPU's PCI bus id ("0000:18:00.0"), NUL-terminated
    std::byte memory[64] = {};        // the buffer, exported once (cudaIpcGetMemHandle)
    std::byte event[64] = {};         // an interprocess event recorded after the batch was written
};
static_assert(std::is_standard_layout_v<PeerRef> && std::is_trivially_copyable_v<PeerRef>);

inline void write_peer_ref(SlotMeta meta, const PeerRef& ref) {
    static_assert(sizeof(PeerRef) <= 192, "the slot's transport words hold 192 bytes");
    std::memcpy(meta.transport().data(), &ref, sizeof ref);
}

// nullopt when the slot carries no peer reference (a host slot, or damaged words).
inline std::optional<PeerRef> read_peer_ref(SlotMeta meta) {
    PeerRef ref;
    std::memcpy(&ref, meta.transport().data(), sizeof ref);
    if (ref.magic != PeerRef::kMagic) return std::nullopt;
    ref.device[sizeof ref.device - 1] = '\0';
    return ref;
}

} // namespace hsring::transport
