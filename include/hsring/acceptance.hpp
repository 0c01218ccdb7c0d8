#pragma once
// DFlash's acceptance-length estimate, shared by the drafter worker (metrics.jsonl) and the
// model tools (hsring-model check-drafter). Pure arithmetic: no torch.
#include <cstddef>

namespace hsring {

// Expected acceptance length from per-position accuracies a_1..a_{B-1} (a_k: the drafter's
// argmax at block position k is the target's token): the bonus token plus the expected run of
// consecutive correct drafts, 1 + sum_k prod_{j<=k} a_j (accuracies treated as independent).
inline double expected_accept_length(const double* acc, std::size_t n) {
    double run = 1.0, total = 1.0;
    for (std::size_t k = 0; k < n; ++k) {
        run *= acc[k];
        total += run;
    }
    return total;
}

} // namespace hsring
