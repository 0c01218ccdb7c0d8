#include "model/drafter/interface/trainable_drafter.hpp"

#include "hsring/acceptance.hpp"
#include "hsring/error.hpp"

#include <ATen/ATen.h>

namespace hsring::model {

void DrafterEvalSums::add(const DrafterEvalSums& o) {
    if (correct.empty()) {
        correct.assign(o.correct.size(), 0.0);
        counted.assign(o.counted.size(), 0.0);
    }
    if (!o.correct.empty() && o.correct.size() != correct.size())
        fail("drafter evaluation: adding sums of {} draft positions to sums of {}", o.correct.size(), correct.size());
    loss_sum += o.loss_sum;
    weight_sum += o.weight_sum;
    for (std::size_t k = 0; k < o.correct.size(); ++k) {
        correct[k] += o.correct[k];
        counted[k] += o.counted[k];
    }
    num_blocks += o.num_blocks;
}

double DrafterEvalSums::loss() const { return weight_sum > 0 ? loss_sum / weight_sum : 0.0; }

std::vector<double> DrafterEvalSums::accuracy() const {
    std::vector<double> a(correct.size(), 0.0);
    for (std::size_t k = 0; k < a.size(); ++k) a[k] = counted[k] > 0 ? correct[k] / counted[k] : 0.0;
    return a;
}

double DrafterEvalSums::accept_length() const {
    const auto a = accuracy();
    return expected_accept_length(a.data(), a.size());
}

void TrainableDrafter::export_to(const std::filesystem::path& dir, at::ScalarType dtype) {
    std::map<std::string, at::Tensor> named;
    for (const auto& p : module().named_parameters()) named[p.key()] = p.value().detach();
    exporter()(dir, named, dtype);
}

} // namespace hsring::model
