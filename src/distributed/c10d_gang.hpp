#pragma once
// The drafter gang over c10d: rendezvous (rendezvous.hpp), then one process group of every
// drafter rank of every machine: ProcessGroupNCCL for GPU drafters, ProcessGroupGloo for CPU
// drafters (GangOptions::cuda, the worker's device, decides; the config refuses "nccl" for CPU
// drafters and "gloo" for GPU drafters). Every collective is waited for on the CPU, at most [distributed] timeout_s; a peer
// that died or hangs turns into GangBroken ("the drafter gang broke during ...": the drafter
// exits 1 with that one line).
//
// NCCL: the process group runs with TORCH_NCCL_BLOCKING_WAIT=1, so work->wait(timeout) blocks
// the CPU and throws on a timeout or an NCCL error (after aborting the communicator), and torch
// turns its asynchronous error handling off (the watchdog no longer tears the process down).
// Under torch's defaults (TORCH_NCCL_ASYNC_ERROR_HANDLING=3) wait() only orders the streams: a
// dead peer hangs the next device sync until the watchdog takes the process down (SIGABRT, a
// page of log). Shown on the CPU (Gloo) by test_gradient_sync; over NCCL by gradient_sync_nccl's
// dead-peer cases, which need two GPUs and have not run yet.
#include "distributed/error_text.hpp"
#include "distributed/gang.hpp"
#include "distributed/rendezvous.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <memory>
#include <optional>

namespace hsring::distributed {

struct GangOptions {
    RendezvousOptions rendezvous;
    bool cuda = false;   // NCCL on the worker's GPU (cuda:0); else Gloo on the CPU
    // How long a collective may take; default: the rendezvous's timeout ([distributed] timeout_s).
    std::optional<std::chrono::milliseconds> collective_timeout;
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
    // Waits for `work` on the CPU, at most timeout(); a failure throws GangBroken naming `what`.
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
