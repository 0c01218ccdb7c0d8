#include "model/drafter/eagle3/export.hpp"

#include "hsring/error.hpp"
#include "model/drafter/interface/hf_dir.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

namespace hsring::model {
namespace fs = std::filesystem;

void export_eagle3(const fs::path& dir, const TensorMap& parameters, const at::Tensor& lm_head, const at::Tensor& d2t,
                   const at::Tensor& t2d, const Eagle3Config& config, at::ScalarType dtype) {
    config.validate("export to " + dir.string());
    if (!lm_head.defined() || lm_head.size(0) != config.draft_vocab_size)
        fail("export to {}: the EAGLE-3 drafter's LM head rows were never set", dir.string());
    TensorMap tensors = parameters;
    tensors["lm_head.weight"] = lm_head;
    if (config.draft_vocab_size < config.vocab_size) {
        tensors["d2t"] = d2t;
        tensors["t2d"] = t2d;
    }
    write_hf_dir(dir, config.to_hf_json(), tensors, dtype);
}

std::pair<Eagle3Drafter, Eagle3Config> import_eagle3(const fs::path& dir, at::Device device) {
    const nlohmann::json j = read_hf_config(dir, "an EAGLE-3 drafter");
    Eagle3Config config = Eagle3Config::from_hf_json(j, (dir / "config.json").string());
    Eagle3Drafter drafter(config, /*seed=*/0, device);
    TensorArchive archive = TensorArchive::open(dir);
    at::NoGradGuard no_grad;
    for (auto& p : drafter->named_parameters()) p.value().copy_(archive.get(p.key(), p.value().sizes()));
    const std::int64_t vd = config.draft_vocab_size, v = config.vocab_size;
    at::Tensor lm_head = archive.get("lm_head.weight", {vd, config.hidden_size}).to(device, at::kFloat);
    at::Tensor d2t, t2d;
    if (vd < v) {
        d2t = archive.get("d2t", {vd}).to(device, at::kLong);
        t2d = archive.get("t2d", {v}).to(device, at::kBool);
    } else {
        d2t = at::zeros({vd}, at::TensorOptions().dtype(at::kLong).device(device));
        t2d = at::ones({v}, at::TensorOptions().dtype(at::kBool).device(device));
    }
    drafter->set_vocab(lm_head, d2t, t2d);
    return {drafter, config};
}

} // namespace hsring::model
