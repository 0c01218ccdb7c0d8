#pragma once
// The drafter ranks that train one model together (data parallel, invariant 9, docs/architecture.md). The
// drafter loop talks to its peers only through this interface, in lockstep: every rank makes the
// same calls in the same order (one round of collectives per optimizer step). SoloGang is the
// one-rank case and does nothing; src/distributed implements the interface over c10d (Gloo on the
// CPU, NCCL on GPUs). A collective that a dead or hung peer never joins throws GangBroken after
// [distributed] timeout_s: the process exits 1 and the supervisors restart the whole gang.
#include "hsring/worker_contract.hpp"

#include <span>
#include <stdexcept>

namespace hsring::distributed {

// A collective failed after the gang formed: a peer died, hung or its machine is gone. Never a
// user error (deliberately not an hsring::Error): also in a worker's first start, before it
// marked itself started, the worker exits 1 and the gang is restarted.
struct GangBroken : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class Gang {
public:
    explicit Gang(GangPlace place) : place_(place) {}
    virtual ~Gang() = default;
    Gang(const Gang&) = delete;
    Gang& operator=(const Gang&) = delete;

    const GangPlace& place() const { return place_; }
    std::uint32_t rank() const { return place_.global_rank(); }
    std::uint32_t world() const { return place_.world(); }

    // Element-wise over all ranks, in place. Doubles hold integers exactly up to 2^53.
    virtual void allreduce_sum(std::span<double> values) = 0;
    virtual void allreduce_max(std::span<double> values) = 0;

private:
    GangPlace place_;
};

class SoloGang final : public Gang {
public:
    SoloGang() : Gang(GangPlace{}) {}
    void allreduce_sum(std::span<double>) override {}
    void allreduce_max(std::span<double>) override {}
};

} // namespace hsring::distributed
