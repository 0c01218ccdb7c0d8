#include "model/drafter/interface/hf_dir.hpp"

#include "hsring/error.hpp"

#include <ATen/ATen.h>

#include <fstream>
#include <unistd.h>

namespace hsring::model {
namespace fs = std::filesystem;

const char* hf_dtype_name(at::ScalarType t) {
    switch (t) {
    case at::kFloat: return "float32";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    default: fail("drafter export dtype must be fp32, bf16 or fp16, got {}", c10::toString(t));
    }
}

void write_hf_dir(const fs::path& dir, nlohmann::json j, const TensorMap& parameters, at::ScalarType dtype) {
    const char* dtype_name = hf_dtype_name(dtype);
    TensorMap tensors;
    for (const auto& [name, t] : parameters)
        tensors[name] = at::isFloatingType(t.scalar_type()) ? t.detach().to(at::kCPU, dtype) : t.detach().to(at::kCPU);
    fs::path tmp = dir;
    tmp += ".tmp-" + std::to_string(::getpid());
    fs::remove_all(tmp);
    fs::create_directories(tmp);
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

nlohmann::json read_hf_config(const fs::path& dir, const char* what) {
    const fs::path cfg_file = dir / "config.json";
    std::ifstream in(cfg_file);
    if (!in) fail("{}: cannot open (is {} {} directory?)", cfg_file.string(), dir.string(), what);
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        fail("{}: not valid JSON: {}", cfg_file.string(), e.what());
    }
}

} // namespace hsring::model
