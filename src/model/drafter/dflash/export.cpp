#include "model/drafter/dflash/export.hpp"

#include "hsring/error.hpp"
#include "model/io/safetensors.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <unistd.h>

namespace hsring::model {
namespace fs = std::filesystem;

namespace {

const char* hf_dtype_name(at::ScalarType t) {
    switch (t) {
    case at::kFloat: return "float32";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    default: fail("drafter export dtype must be fp32, bf16 or fp16, got {}", c10::toString(t));
    }
}

} // namespace

void export_dflash(const fs::path& dir, DFlashDrafter& drafter, const DFlashConfig& config, at::ScalarType dtype) {
    TensorMap parameters;
    for (const auto& p : drafter->named_parameters()) parameters[p.key()] = p.value().detach();
    export_dflash(dir, parameters, config, dtype);
}

void export_dflash(const fs::path& dir, const TensorMap& parameters, const DFlashConfig& config, at::ScalarType dtype) {
    config.validate("export to " + dir.string());
    const char* dtype_name = hf_dtype_name(dtype);
    TensorMap tensors;
    for (const auto& [name, t] : parameters) tensors[name] = t.detach().to(at::kCPU, dtype);

    fs::path tmp = dir;
    tmp += ".tmp-" + std::to_string(::getpid());
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    nlohmann::json j = config.to_hf_json();
    j["dtype"] = dtype_name;        // transformers >= 4.56
    j["torch_dtype"] = dtype_name;  // older readers
    {
        std::ofstream out(tmp / "config.json");
        out << j.dump(2) << "\n";
        if (!out) fail("{}: cannot write config.json: {}", tmp.string(), errno_text(errno));
    }
    save_safetensors(tmp / "model.safetensors", tensors, {{"format", "pt"}});
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::rename(tmp, dir, ec);
    if (ec) fail("cannot move {} to {}: {}", tmp.string(), dir.string(), ec.message());
}

std::pair<DFlashDrafter, DFlashConfig> import_dflash(const fs::path& dir, at::Device device) {
    const fs::path cfg_file = dir / "config.json";
    std::ifstream in(cfg_file);
    if (!in) fail("{}: cannot open (is {} a DFlash drafter directory?)", cfg_file.string(), dir.string());
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        fail("{}: not valid JSON: {}", cfg_file.string(), e.what());
    }
    DFlashConfig config = DFlashConfig::from_hf_json(j, cfg_file.string());
    DFlashDrafter drafter(config, /*seed=*/0, device);
    TensorArchive archive = TensorArchive::open(dir);
    at::NoGradGuard no_grad;
    for (auto& p : drafter->named_parameters()) p.value().copy_(archive.get(p.key(), p.value().sizes()));
    return {drafter, config};
}

} // namespace hsring::model
