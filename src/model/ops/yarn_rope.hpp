#pragma once
// YaRN rotary scaling (Peng et al. 2023), as transformers computes it (_compute_yarn_parameters):
// gpt-oss's `rope_scaling` {"rope_type": "yarn", "factor": 32, "beta_fast": 32, "beta_slow": 1,
// "original_max_position_embeddings": 4096, "truncate": false}. Frequencies below the correction
// range are interpolated (divided by factor), those above it kept, a linear ramp between; cos and
// sin are then multiplied by the attention factor (0.1 ln(factor) + 1 unless given).
#include "hsring/model_shape.hpp"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace hsring::model {

struct YarnRope {
    at::Tensor inv_freq;  // [head_dim / 2] fp32
    double attention_factor = 1.0;
};

// The fields of `p` YaRN reads: factor, beta_fast, beta_slow, original_max_position_embeddings,
// truncate, attention_factor, mscale, mscale_all_dim (hsring/model_shape.hpp RopeScaling).
// Throws hsring::Error for factor < 1 or an odd head_dim.
YarnRope yarn_rope(std::int64_t head_dim, double theta, const RopeScaling& p);
// The attention factor alone (a formula of p: no tensors), what yarn_rope returns with the frequencies.
double yarn_attention_factor(const RopeScaling& p);

} // namespace hsring::model
