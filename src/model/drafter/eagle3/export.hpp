#pragma once
// An EAGLE-3 drafter as the directory SGLang and vLLM load (the original EAGLE-3 format):
//   DIR/config.json        Eagle3Config::to_hf_json() (+ "dtype")
//   DIR/model.safetensors  fc.weight, midlayer.*, norm.weight, lm_head.weight [draft vocab, H], and
//                          with a draft vocabulary smaller than the target's, d2t [Vd] int64 and
//                          t2d [V] bool. No embed_tokens: servers take the target's.
// Written to a temporary directory first and renamed into place, so DIR is complete or absent.
#include "model/drafter/eagle3/config.hpp"
#include "model/drafter/eagle3/drafter.hpp"
#include "model/io/safetensors.hpp"

#include <filesystem>
#include <utility>

namespace hsring::model {

// `parameters`: named_parameters()' names -> tensors (host copies or live); lm_head, d2t, t2d the
// drafter's frozen tensors.
void export_eagle3(const std::filesystem::path& dir, const TensorMap& parameters, const at::Tensor& lm_head,
                   const at::Tensor& d2t, const at::Tensor& t2d, const Eagle3Config& config,
                   at::ScalarType dtype = at::kFloat);

// Reads config.json and model.safetensors into a drafter on `device` (fp32 parameters, the LM head
// rows and the vocabulary map as buffers). Missing or mis-shaped tensors are errors naming the file.
std::pair<Eagle3Drafter, Eagle3Config> import_eagle3(const std::filesystem::path& dir, at::Device device = at::kCPU);

} // namespace hsring::model
