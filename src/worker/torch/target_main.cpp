// hsring-target --config FILE --run-dir DIR: the target worker (CONTRACT.md). Runs the frozen
// target on its GPU (or the CPU) and writes captured hidden states into the ring.
#include "hsring/error.hpp"
#include "worker/core/context.hpp"
#include "worker/torch/torch_target.hpp"

namespace {

int body(int argc, char** argv) {
    using namespace hsring::worker;
    auto ctx = Context::open(argc, argv);
    if (ctx->env.role != hsring::WorkerRole::Target) hsring::fail("hsring-target runs targets; the drafter is hsring-drafter");
    TorchTarget compute(*ctx);
    mark_started();
    return run_target(*ctx, compute);
}

} // namespace

int main(int argc, char** argv) {
    ::setenv("HSRING_ROLE", "target", 0);
    return hsring::worker::run_guarded("hsring-target", body, argc, argv);
}
