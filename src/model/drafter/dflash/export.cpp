#include "model/drafter/dflash/export.hpp"

#include "hsring/error.hpp"
#include "model/drafter/interface/hf_dir.hpp"
#include "model/io/safetensors.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>


namespace hsring::model {
namespace fs = std::filesystem;

void export_dflash(const fs::path& dir, DFlashDrafter& drafter, const DFlashConfig& config, at::ScalarType dtype) {
    TensorMap parameters;
    for (const auto& p : drafter->named_parameters()) parameters[p.key()] = p.value().detach();
    export_dflash(dir, parameters, config, dtype);
}

void export_dflash(const fs::path& dir, const TensorMap& parameters, const DFlashConfig& config, at::ScalarType dtype) {
    config.validate("export to " + dir.string());
    write_hf_dir(dir, config.to_hf_json(), parameters, dtype);
}

std::pair<DFlashDrafter, DFlashConfig> import_dflash(const fs::path& dir, at::Device device) {
    const nlohmann::json j = read_hf_config(dir, "a DFlash drafter");
    DFlashConfig config = DFlashConfig::from_hf_json(j, (dir / "config.json").string());
    DFlashDrafter drafter(config, /*seed=*/0, device);
    TensorArchive archive = TensorArchive::open(dir);
    at::NoGradGuard no_grad;
    for (auto& p : drafter->named_parameters()) p.value().copy_(archive.get(p.key(), p.value().sizes()));
    return {drafter, config};
}

} // namespace hsring::model
