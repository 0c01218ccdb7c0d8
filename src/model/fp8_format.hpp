#pragma once
// What both FP8 paths (fp8_linear.hpp: the drafter's trained layers, tensorwise scales;
// fp8_weights.hpp: the frozen target's, row and token scales) need to know of the formats and of
// at::_scaled_mm.
#include <cstdint>

namespace hsring::model::fp8 {

inline constexpr double kE4M3Max = 448.0;    // largest finite float8_e4m3fn
inline constexpr double kE5M2Max = 57344.0;  // largest finite float8_e5m2
// amax below this counts as zero: a zero tensor or row gets a finite scale and quantizes to zeros.
inline constexpr double kMinAmax = 1e-12;
inline constexpr std::int64_t kAlign = 16;  // _scaled_mm: every matrix dimension a multiple of 16

// Rows padded up to what _scaled_mm takes (the quantized copy holds zero rows past the input's).
inline std::int64_t padded_rows(std::int64_t rows) { return (rows + kAlign - 1) / kAlign * kAlign; }

} // namespace hsring::model::fp8
