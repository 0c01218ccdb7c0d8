// hsring model ...: runs hsring-model, which links LibTorch; `hsring` itself never does
// (invariant 5, docs/architecture.md).
#include "cli/commands.hpp"
#include "hsring/programs.hpp"

namespace hsring::cli {

int model(Args args) {
    exec_program("hsring-model", static_cast<int>(args.size()), args.data());
}

} // namespace hsring::cli
