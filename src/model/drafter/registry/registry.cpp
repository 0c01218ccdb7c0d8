#include "model/drafter/registry/registry.hpp"

#include "hsring/error.hpp"
#include "model/drafter/dflash/trainable.hpp"
#include "model/drafter/eagle3/trainable.hpp"
#include "model/drafter/interface/hf_dir.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <array>

namespace hsring::model {
namespace {

struct DrafterType {
    const char* name;          // [drafter] type
    const char* architecture;  // config.json "architectures" of its export
    std::unique_ptr<TrainableDrafter> (*create)(const DrafterSpec&, std::uint64_t, at::Device);
    std::unique_ptr<TrainableDrafter> (*load)(const std::filesystem::path&, at::Device);
};

constexpr std::array kTypes{
    DrafterType{"dflash", "DFlashDraftModel", &DFlashTrainable::create, &DFlashTrainable::load},
    DrafterType{"eagle3", "LlamaForCausalLMEagle3", &Eagle3Trainable::create, &Eagle3Trainable::load},
};

std::string known() {
    std::string s;
    for (const auto& t : kTypes) s += fmt::format("{}\"{}\"", s.empty() ? "" : ", ", t.name);
    return s;
}

const DrafterType& of_dir(const std::filesystem::path& dir) {
    const nlohmann::json j = read_hf_config(dir, "a drafter");
    if (j.is_object() && j.contains("architectures") && j["architectures"].is_array())
        for (const auto& a : j["architectures"])
            for (const auto& t : kTypes)
                if (a == t.architecture) return t;
    std::string archs;
    for (const auto& t : kTypes) archs += fmt::format("{}\"{}\"", archs.empty() ? "" : " or ", t.architecture);
    fail("{}: architectures must list {} (a drafter hsring reads)", (dir / "config.json").string(), archs);
}

} // namespace

std::unique_ptr<TrainableDrafter> make_drafter(const DrafterSpec& spec, std::uint64_t seed, at::Device device) {
    for (const auto& t : kTypes)
        if (spec.type == t.name) return t.create(spec, seed, device);
    fail("[drafter] type \"{}\" is not a drafter type hsring trains ({})", spec.type, known());
}

std::unique_ptr<TrainableDrafter> load_drafter(const std::filesystem::path& dir, at::Device device) {
    std::unique_ptr<TrainableDrafter> d = of_dir(dir).load(dir, device);
    // Nothing non-finite is trained from, resumed or decoded with: a NaN weight would train NaN
    // ([drafter] init) or draft garbage that verification rejects ("tau 1.000, lossless").
    at::NoGradGuard no_grad;
    auto check_finite = [&](const torch::OrderedDict<std::string, at::Tensor>& tensors) {
        for (const auto& t : tensors)
            if (t.value().is_floating_point() && !at::isfinite(t.value()).all().item<bool>())
                fail("{}: the drafter's {} holds non-finite values (NaN or inf): a broken export; export it again "
                     "from a checkpoint whose weights are finite", dir.string(), t.key());
    };
    check_finite(d->module().named_parameters());
    check_finite(d->module().named_buffers());  // EAGLE-3's LM head rows
    return d;
}

std::string drafter_type_of(const std::filesystem::path& dir) { return of_dir(dir).name; }

} // namespace hsring::model
