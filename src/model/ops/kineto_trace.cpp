#include "model/ops/kineto_trace.hpp"

#include "hsring/error.hpp"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include <filesystem>
#include <set>

namespace hsring::model {

void write_kineto_trace(const std::string& path, bool cuda, int calls, const std::function<void()>& step) {
    namespace prof = torch::profiler::impl;
    std::set<prof::ActivityType> activities{prof::ActivityType::CPU};
    if (cuda) activities.insert(prof::ActivityType::CUDA);
    const prof::ProfilerConfig config(prof::ProfilerState::KINETO, /*report_input_shapes=*/true);
    torch::autograd::profiler::prepareProfiler(config, activities);
    if (cuda) torch::cuda::synchronize();
    torch::autograd::profiler::enableProfiler(config, activities);
    for (int i = 0; i < calls; ++i) step();
    if (cuda) torch::cuda::synchronize();
    auto result = torch::autograd::profiler::disableProfiler();
    std::error_code ec;
    const auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    result->save(path);
    if (!std::filesystem::exists(path)) fail("--trace: could not write {} (is its directory writable?)", path);
}

} // namespace hsring::model
