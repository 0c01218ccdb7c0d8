#pragma once
// MXFP4 weights (OCP microscaling FP4) as gpt-oss ships its experts: a tensor NAME is stored as
//   NAME_blocks  uint8 [..., G, 16]: 32 FP4 (e2m1) values per group, two per byte, low nibble first
//   NAME_scales  uint8 [..., G]:     one e8m0 scale per group of 32, value 2^(s - 127)
// and means [..., G * 32] = fp4 value x group scale. Dequantised on load to the compute dtype,
// exactly: every e2m1 value times a power of two is representable in bf16 and fp32 (for scales
// within their exponent ranges), so the result is what transformers' convert_moe_packed_tensors
// gives before its final transpose.
#include <ATen/core/Tensor.h>

#include <c10/core/ScalarType.h>

#include <string>

namespace hsring::model {

// blocks uint8 [..., G, 16], scales uint8 [..., G] (any device) -> dtype [..., G * 32] on the
// blocks' device. Throws hsring::Error naming `what` for mismatched shapes or dtypes.
at::Tensor dequantize_mxfp4(const at::Tensor& blocks, const at::Tensor& scales, at::ScalarType dtype,
                            const std::string& what);

} // namespace hsring::model
