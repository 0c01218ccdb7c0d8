#pragma once
// Reading a drafter's config.json, for every drafter type: keys that must be there, integers, the
// architecture it names, and the decoder shape all types share (sizes, norm eps, rotary
// embedding). Each error names the file (`where`) and the key.
#include "hsring/model_shape.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace hsring::model {

class HfConfigReader {
public:
    // kind: "a DFlash drafter", for "is this a DFlash drafter's config.json?". Fails unless j is
    // an object listing `architecture` in "architectures".
    HfConfigReader(const nlohmann::json& j, std::string where, std::string kind, const char* architecture);

    const nlohmann::json& need(const char* key) const;
    std::int64_t integer(const nlohmann::json& v, const std::string& key) const;
    std::int64_t need_int(const char* key) const { return integer(need(key), key); }
    // The key's integer, or `fallback` when it is absent or null.
    std::int64_t int_or(const char* key, std::int64_t fallback) const;
    const nlohmann::json& json() const { return j_; }
    const std::string& where() const { return where_; }

private:
    const nlohmann::json& j_;
    std::string where_, kind_;
};

// The decoder layers' shape as transformers' Llama/Qwen3 configs spell it; defaults for keys
// a config may leave out.
struct HfDecoderShape {
    std::int64_t hidden_size = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, intermediate_size = 0, vocab_size = 0;
    std::int64_t max_position_embeddings = 0;
    double rms_norm_eps = 1e-6;
    double rope_theta = 0;
    RopeScaling rope_scaling;
};

// rope_parameters (transformers 5) or rope_scaling (4.x) for the scaling and theta.
HfDecoderShape read_hf_decoder_shape(const HfConfigReader& r, std::int64_t default_max_positions, double default_theta);

} // namespace hsring::model
