#pragma once
// A drafter's HF directory (config.json + model.safetensors), written to a temporary directory
// first and renamed into place, so DIR is complete or absent; and read back.
#include "model/io/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>

namespace hsring::model {

// "float32", "bfloat16", "float16"; anything else is an error (a drafter export's dtypes).
const char* hf_dtype_name(at::ScalarType dtype);

// config.json gets "dtype"/"torch_dtype" = `dtype`'s name; floating tensors are cast to `dtype`,
// others (ids, masks) written as they are.
void write_hf_dir(const std::filesystem::path& dir, nlohmann::json config, const TensorMap& tensors,
                  at::ScalarType dtype);

// DIR/config.json parsed; `what` names the expected kind in the error ("a DFlash drafter").
nlohmann::json read_hf_config(const std::filesystem::path& dir, const char* what);

} // namespace hsring::model
