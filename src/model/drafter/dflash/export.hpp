#pragma once
// A drafter as a HF directory that z-lab's DFlashDraftModel, SGLang and vLLM load:
//   DIR/config.json        DFlashConfig::to_hf_json() (+ "dtype")
//   DIR/model.safetensors  the parameters under their public DFlash names
// Written to a temporary directory first and renamed into place, so DIR is complete or absent.
#include "model/drafter/dflash/config.hpp"
#include "model/drafter/dflash/drafter.hpp"

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <string>
#include <utility>

namespace hsring::model {

// `dtype`: fp32 (default) keeps the master weights bit-exact; bf16 is what serving stacks load.
void export_dflash(const std::filesystem::path& dir, DFlashDrafter& drafter, const DFlashConfig& config,
                   at::ScalarType dtype = at::kFloat);
// The same from parameters already copied out of a drafter (name -> tensor, as named_parameters()
// names them): a checkpoint written on another thread while the live drafter trains on.
void export_dflash(const std::filesystem::path& dir, const std::map<std::string, at::Tensor>& parameters,
                   const DFlashConfig& config, at::ScalarType dtype = at::kFloat);

// Reads config.json and model.safetensors into a drafter on `device` (fp32 parameters).
// Missing or mis-shaped tensors are errors naming the file; extra tensors are ignored.
std::pair<DFlashDrafter, DFlashConfig> import_dflash(const std::filesystem::path& dir, at::Device device = at::kCPU);

} // namespace hsring::model
