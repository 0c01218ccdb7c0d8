#pragma once
// DFlash's expected acceptance length from per-position accuracies a_1..a_{B-1}: the bonus token
// plus the expected run of consecutive correct drafts, 1 + sum_k prod_{j<=k} a_j. Used by the
// drafter's metrics and held-out evaluation and by `hsring model check-drafter`.
#include <cstddef>

namespace hsring {

inline double expected_accept_length(const double* acc, std::size_t n) {
    double run = 1.0, total = 1.0;
    for (std::size_t k = 0; k < n; ++k) {
        run *= acc[k];
        total += run;
    }
    return total;
}

} // namespace hsring
