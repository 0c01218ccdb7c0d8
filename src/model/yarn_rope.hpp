#pragma once
// YaRN rotary scaling (Peng et al. 2023), as transformers computes it (_compute_yarn_parameters):
// gpt-oss's `rope_scaling` {"rope_type": "yarn", "factor": 32, "beta_fast": 32, "beta_slow": 1,
// "original_max_position_embeddings": 4096, "truncate": false}. Frequencies below the correction
// range are interpolated (divided by factor), those above it kept, a linear ramp between; cos and
// sin are then multiplied by the attention factor (0.1 ln(factor) + 1 unless given).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace hsring::model {

struct YarnParams {
    double factor = 1.0;
    double beta_fast = 32.0;
    double beta_slow = 1.0;
    std::int64_t original_max_position_embeddings = 4096;
    bool truncate = true;
    std::optional<double> attention_factor;  // else from factor (and mscale / mscale_all_dim)
    std::optional<double> mscale, mscale_all_dim;
};

struct YarnRope {
    at::Tensor inv_freq;  // [head_dim / 2] fp32
    double attention_factor = 1.0;
};

// Throws hsring::Error for factor < 1 or an odd head_dim.
YarnRope yarn_rope(std::int64_t head_dim, double theta, const YarnParams& p);

} // namespace hsring::model
