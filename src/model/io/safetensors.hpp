#pragma once
// safetensors files (the format HF model directories use), read and written without Python.
//
//   +---------+----------------------------+--------------------------------------------+
//   | u64 LE N| N bytes of JSON header     | data: tensors back to back, row-major       |
//   +---------+----------------------------+--------------------------------------------+
//   header = {"NAME": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [BEGIN, END]}, ...,
//             "__metadata__": {"key": "value", ...}}      offsets are relative to the data start
//
// Reading maps the file (MAP_PRIVATE, copy-on-write) and returns tensors that alias the mapping:
// no copy, and pages are read only when a tensor is used. The mapping lives as long as any of
// its tensors. Errors are hsring::Error naming the file and the tensor.
#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace hsring::model {

using TensorMap = std::map<std::string, at::Tensor>;
using Metadata = std::map<std::string, std::string>;

struct SafetensorsFile {
    TensorMap tensors;
    Metadata metadata;
};

// One .safetensors file. Supported dtypes: BF16, F16, F32, F64, I64, I32, I16, I8, U8, BOOL.
SafetensorsFile read_safetensors(const std::filesystem::path& file);

// Writes `tensors` (any device; contiguous copies are made as needed) and `metadata` to `file`
// atomically (a temporary file renamed over it).
void save_safetensors(const std::filesystem::path& file, const TensorMap& tensors,
                      const Metadata& metadata = {});

// The tensors of a model: a .safetensors file, or a directory holding either a sharded
// checkpoint (model.safetensors.index.json + its shards) or a single model.safetensors.
// Remembers which file each tensor came from, so errors can name it.
class TensorArchive {
public:
    static TensorArchive open(const std::filesystem::path& file_or_dir);

    bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
    // The tensor `name`; throws naming the archive for a missing tensor and the file for a
    // shape mismatch ("FILE: tensor NAME has shape [a, b], expected [c, d]").
    const at::Tensor& get(const std::string& name, at::IntArrayRef expected_shape) const;
    const at::Tensor& get(const std::string& name) const;
    const TensorMap& tensors() const { return tensors_; }
    const std::filesystem::path& file_of(const std::string& name) const;
    // The file a missing tensor is reported against: the .safetensors file, or a directory's
    // model.safetensors or model.safetensors.index.json.
    const std::filesystem::path& where() const { return where_; }

private:
    std::filesystem::path where_;
    TensorMap tensors_;
    std::map<std::string, std::filesystem::path> files_;
};

// name -> tensor of a file or model directory (see TensorArchive).
TensorMap load_safetensors(const std::filesystem::path& file_or_dir);

// "BF16" <-> at::kBFloat16 etc.; throws for dtypes hsring does not handle.
at::ScalarType safetensors_dtype(const std::string& name, const std::string& where);
std::string safetensors_dtype_name(at::ScalarType t);

std::string shape_str(at::IntArrayRef shape);

} // namespace hsring::model
