// MXFP4 -> bf16/fp32 (see mxfp4.hpp).
#include "model/io/mxfp4.hpp"

#include "hsring/error.hpp"
#include "model/io/safetensors.hpp"

#include <ATen/ATen.h>

namespace hsring::model {

at::Tensor dequantize_mxfp4(const at::Tensor& blocks, const at::Tensor& scales, at::ScalarType dtype,
                            const std::string& what) {
    if (blocks.scalar_type() != at::kByte || scales.scalar_type() != at::kByte)
        fail("{}: MXFP4 blocks and scales must be uint8, got {} and {}", what, c10::toString(blocks.scalar_type()),
             c10::toString(scales.scalar_type()));
    if (blocks.dim() < 2 || blocks.size(-1) != 16 || scales.dim() != blocks.dim() - 1 ||
        scales.sizes() != blocks.sizes().slice(0, blocks.dim() - 1))
        fail("{}: MXFP4 blocks {} and scales {} do not match ([..., G, 16] and [..., G])", what,
             shape_str(blocks.sizes()), shape_str(scales.sizes()));
    // e2m1: sign, 2 exponent bits, 1 mantissa bit; index = the 4-bit code.
    static const float kFp4[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    const at::Device dev = blocks.device();
    const at::Tensor lut = at::from_blob(const_cast<float*>(kFp4), {16}, at::kFloat).to(dev);
    const at::Tensor b = blocks.to(at::kLong);
    // [..., G, 16, 2]: low nibble, then high nibble, of each byte.
    const at::Tensor codes = at::stack({at::bitwise_and(b, 15), at::bitwise_right_shift(b, 4)}, -1);
    at::Tensor values = lut.index({codes.reshape(-1)}).view(codes.sizes());
    std::vector<std::int64_t> grouped(blocks.sizes().begin(), blocks.sizes().end() - 1);
    grouped.push_back(32);
    values = values.reshape(grouped);  // [..., G, 32]
    // x 2^(s - 127) per group in fp32, then the output dtype: exact (a power of two times an e2m1
    // value has at most 2 significant bits).
    const at::Tensor exponent = scales.to(dev, at::kInt).sub(127).unsqueeze(-1);
    values = at::ldexp(values, exponent).to(dtype);
    std::vector<std::int64_t> out(blocks.sizes().begin(), blocks.sizes().end() - 2);
    out.push_back(blocks.size(-2) * 32);
    return values.reshape(out);
}

} // namespace hsring::model
