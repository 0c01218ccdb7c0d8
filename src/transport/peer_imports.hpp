#pragma once
// A peer reader's imported handles (CUDA-free bookkeeping; the CUDA calls are injected). A
// writer's buffers are imported once per (writer, incarnation): on first use, and again only
// when that writer restarted (a new holder for its rank). Imports of a writer that died or left
// are closed by sweep(), so no handle is used after its exporter is gone.
#include "hsring/ring.hpp"
#include "transport/peer_ref.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>

namespace hsring::transport {

// One imported buffer: the mapped memory and the imported event (opaque to this file).
struct Imported {
    void* memory = nullptr;
    void* event = nullptr;
};

class PeerImports {
public:
    struct Calls {
        std::function<Imported(const PeerRef&)> open;  // throws hsring::Error when it cannot
        std::function<void(const Imported&)> close;
    };
    explicit PeerImports(Calls calls);
    ~PeerImports();  // closes everything
    PeerImports(const PeerImports&) = delete;
    PeerImports& operator=(const PeerImports&) = delete;

    // The imports of the buffer `ref` names, held by `holder` (target rank `writer`). A holder
    // other than the one imported for that rank closes the predecessor's imports first.
    const Imported& get(std::uint32_t writer, Owner holder, const PeerRef& ref);
    // Closes the imports of every holder `alive` says is gone; returns how many writers.
    std::size_t sweep(const std::function<bool(Owner)>& alive);
    // Buffers imported now (all writers).
    std::size_t imported() const;
    // Holders with imports now.
    std::size_t holders() const { return writers_.size(); }

private:
    struct Writer {
        Owner holder;
        std::map<std::uint32_t, std::pair<PeerRef, Imported>> buffers;
    };
    void close_all(Writer& w);
    Calls calls_;
    std::map<std::uint32_t, Writer> writers_;
};

} // namespace hsring::transport
