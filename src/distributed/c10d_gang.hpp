#pragma once
// The drafter gang over c10d: rendezvous (rendezvous.hpp), then one process group of every
// drafter rank of every machine: ProcessGroupNCCL for GPU drafters, ProcessGroupGloo for CPU
// drafters ([distributed] backend). Collectives wait at most [distributed] timeout_s; a peer that
// died or hangs turns into an hsring::Error ("the drafter gang broke: ...").
#include "distributed/gang.hpp"
#include "distributed/rendezvous.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <memory>

namespace hsring::distributed {

struct GangOptions {
    RendezvousOptions rendezvous;
    bool cuda = false;   // NCCL on the worker's GPU (cuda:0); else Gloo on the CPU
};

class C10dGang final : public Gang {
public:
    static std::unique_ptr<C10dGang> join(const GangOptions& options);
    ~C10dGang() override;

    void allreduce_sum(std::span<double> values) override;
    void allreduce_max(std::span<double> values) override;

    const c10::intrusive_ptr<c10d::ProcessGroup>& process_group() const { return pg_; }
    at::Device device() const { return device_; }
    std::chrono::milliseconds timeout() const { return timeout_; }
    // Waits for `work` (timeout included); a failure says the gang broke.
    void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what) const;

private:
    C10dGang(GangPlace place, Rendezvous rz, c10::intrusive_ptr<c10d::ProcessGroup> pg, at::Device device,
             std::chrono::milliseconds timeout);
    void allreduce(std::span<double> values, c10d::ReduceOp op);

    Rendezvous rz_;
    c10::intrusive_ptr<c10d::ProcessGroup> pg_;
    at::Device device_;
    std::chrono::milliseconds timeout_;
};

// A one-rank world gets a SoloGang; more ranks join the c10d gang.
std::unique_ptr<Gang> open_gang(const GangOptions& options);

} // namespace hsring::distributed
