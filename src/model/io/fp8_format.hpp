#pragma once
// What the FP8 paths (fp8_weights.hpp: row and token scales; fp8_linear.hpp, the drafter's trained
// layers, built on it) need to know of the format and of at::_scaled_mm.
#include <cstdint>

namespace hsring::model::fp8 {

inline constexpr double kE4M3Max = 448.0;    // largest finite float8_e4m3fn
// amax below this counts as zero: a zero tensor or row gets a finite scale and quantizes to zeros.
inline constexpr double kMinAmax = 1e-12;
inline constexpr std::int64_t kAlign = 16;  // _scaled_mm: every matrix dimension a multiple of 16

// Rows padded up to what _scaled_mm takes (the quantized copy holds zero rows past the input's).
inline std::int64_t padded_rows(std::int64_t rows) { return (rows + kAlign - 1) / kAlign * kAlign; }

} // namespace hsring::model::fp8
