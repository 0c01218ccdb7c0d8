#pragma once
// A TCP port on 127.0.0.1 that the kernel says is free now (bind to port 0, read it back,
// close): for a rendezvous on loopback (tests, benchmarks, hsring drill). Someone else may take
// it before it is used; callers that listen on it must cope with that (the rendezvous retries).
#include <cstdint>

namespace hsring {

// Throws hsring::Error when no socket can be made or bound.
std::uint16_t free_loopback_port();

} // namespace hsring
