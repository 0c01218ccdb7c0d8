#include "model/tools/cli_args.hpp"

#include <torch/cuda.h>

namespace hsring::model::tools {

at::Device parse_device(const char* cmd, const std::string& s) {
    at::Device d(at::kCPU);
    try {
        d = at::Device(s);
    } catch (const std::exception&) {
        throw UsageError(fmt::format("{}: --device '{}' is not a device (cpu, cuda, cuda:1)", cmd, s));
    }
    if (d.is_cuda() && !torch::cuda::is_available())
        fail("{}: --device {} but torch sees no CUDA device (or this build has no torch_cuda): use --device cpu", cmd,
             s);
    return d;
}

} // namespace hsring::model::tools
