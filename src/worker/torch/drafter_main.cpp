// hsring-drafter --config FILE --run-dir DIR: the drafter worker (CONTRACT.md). Joins the
// data-parallel gang of the run's drafter ranks (alone when there is one), trains the DFlash
// drafter on hidden states from the ring, checkpoints, exports.
#include "hsring/error.hpp"
#include "hsring/log.hpp"
#include "hsring/transport.hpp"
#include "worker/core/context.hpp"
#include "worker/gang/gang_options.hpp"
#include "worker/torch/torch_drafter.hpp"

#include <chrono>

namespace {

int body(int argc, char** argv) {
    using namespace hsring::worker;
    auto ctx = Context::open(argc, argv);
    if (ctx->env.role != hsring::WorkerRole::Drafter) hsring::fail("hsring-drafter runs the drafter; targets are hsring-target");
    hsring::transport::prepare_drafter_devices(ctx->cfg, ctx->env.cuda);  // before anything starts CUDA
    // A gang restarted after a failure retries its rendezvous as a restartable failure; the first
    // start of a run reports an unreachable master or a mismatch as a user error (exit 3).
    if (ctx->env.gang_generation > 1) mark_started();
    auto gang = hsring::distributed::open_gang(gang_options(*ctx));
    const auto t0 = std::chrono::steady_clock::now();
    TorchDrafter compute(*ctx, *gang);
    hsring::log::info("drafter built in {:.1f} s (target head, staging buffers, ring registered with the transport)",
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return run_drafter(*ctx, compute, *gang);  // marks started once the checkpoint is restored
}

} // namespace

int main(int argc, char** argv) {
    ::setenv("HSRING_ROLE", "drafter", 0);
    return hsring::worker::run_guarded("hsring-drafter", body, argc, argv);
}
