#pragma once
// A peer writer's device buffers (CUDA-free bookkeeping): which one may take the next batch.
// A buffer is busy from the batch written into it until its slot has let go of that commit: the
// slot turned FREE, or holds another ticket (it was freed and claimed again). Until then a reader
// may still be copying from it, so it is never overwritten (and never freed while we live).
#include "hsring/ring.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace hsring::transport {

class PeerBuffers {
public:
    explicit PeerBuffers(std::uint32_t count);
    std::uint32_t count() const { return static_cast<std::uint32_t>(held_.size()); }

    // A free buffer now, or nullopt.
    std::optional<std::uint32_t> find_free(const Ring& ring) const;
    // Waits until a buffer is free (sleeping on the ring's releases), up to `timeout`; nullopt
    // then, or as soon as the ring is stopping or `stop` (a worker's stop flag) says so: the
    // drafters that would free a buffer may be gone for good, and a stop must not hang here.
    std::optional<std::uint32_t> wait_free(Ring& ring, std::chrono::milliseconds timeout,
                                           const std::function<bool()>& stop = {}) const;
    // Buffer `b` holds the batch of `slot` under `ticket` (before that slot's commit).
    void hold(std::uint32_t b, std::uint32_t slot, std::uint64_t ticket);
    // Buffers whose batch a reader may still use.
    std::uint32_t busy(const Ring& ring) const;

private:
    struct Held {
        bool used = false;
        std::uint32_t slot = 0;
        std::uint64_t ticket = 0;
    };
    bool is_free(const Ring& ring, const Held& h) const;
    std::vector<Held> held_;
};

} // namespace hsring::transport
