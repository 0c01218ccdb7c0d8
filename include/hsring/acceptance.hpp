#pragma once
// DFlash's acceptance-length estimate, shared by the drafter worker (metrics.jsonl) and the
// model tools (hsring-model check-drafter), and the measured acceptance per drafted position,
// shared by target.0's and the supervisor's tau rows. Pure arithmetic: no torch.
#include <cstddef>
#include <cstdint>
#include <vector>

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

// From measured acceptance lengths (per verify step: accepted drafts + 1): for drafted positions
// k = 1..block-1, the share of verify steps whose first k drafts were all accepted (length >= k+1).
inline std::vector<double> acceptance_per_position(const std::vector<std::int64_t>& lengths, std::int64_t block) {
    std::vector<double> out;
    for (std::int64_t k = 1; k < block; ++k) {
        std::size_t hit = 0;
        for (std::int64_t a : lengths) hit += a >= k + 1 ? 1 : 0;
        out.push_back(lengths.empty() ? 0.0 : double(hit) / double(lengths.size()));
    }
    return out;
}

} // namespace hsring
