// hsring-drafter --config FILE --run-dir DIR: the drafter worker (CONTRACT.md). Trains the
// DFlash drafter on hidden states from the ring, checkpoints, exports.
#include "hsring/error.hpp"
#include "worker/context.hpp"
#include "worker/torch_drafter.hpp"

namespace {

int body(int argc, char** argv) {
    using namespace hsring::worker;
    auto ctx = Context::open(argc, argv);
    if (ctx->env.role != WorkerRole::Drafter) hsring::fail("hsring-drafter runs the drafter; targets are hsring-target");
    TorchDrafter compute(*ctx);
    return run_drafter(*ctx, compute);  // marks started once the checkpoint is restored
}

} // namespace

int main(int argc, char** argv) {
    ::setenv("HSRING_ROLE", "drafter", 0);
    return hsring::worker::run_guarded("hsring-drafter", body, argc, argv);
}
