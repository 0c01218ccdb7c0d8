#include "model/drafter/eagle3/vocab.hpp"

#include "hsring/error.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

namespace hsring::model {

std::pair<at::Tensor, at::Tensor> eagle3_vocab_map(const std::vector<std::int64_t>& counts, std::int64_t draft_vocab) {
    const auto vocab = static_cast<std::int64_t>(counts.size());
    if (draft_vocab <= 0 || draft_vocab > vocab)
        fail("EAGLE-3 draft vocabulary of {} tokens: must be in 1..{} (the target's vocabulary)", draft_vocab, vocab);
    std::vector<std::int64_t> seen;
    for (std::int64_t id = 0; id < vocab; ++id)
        if (counts[static_cast<std::size_t>(id)] > 0) seen.push_back(id);
    std::stable_sort(seen.begin(), seen.end(), [&](std::int64_t a, std::int64_t b) {
        return counts[static_cast<std::size_t>(a)] > counts[static_cast<std::size_t>(b)];  // ties keep id order
    });
    if (static_cast<std::int64_t>(seen.size()) > draft_vocab) seen.resize(static_cast<std::size_t>(draft_vocab));
    std::vector<bool> taken(static_cast<std::size_t>(vocab), false);
    for (std::int64_t id : seen) taken[static_cast<std::size_t>(id)] = true;
    for (std::int64_t id = 0; static_cast<std::int64_t>(seen.size()) < draft_vocab && id < draft_vocab; ++id)
        if (!taken[static_cast<std::size_t>(id)]) {
            seen.push_back(id);
            taken[static_cast<std::size_t>(id)] = true;
        }
    std::sort(seen.begin(), seen.end());
    const auto i64 = at::TensorOptions().dtype(at::kLong);
    at::Tensor ids = at::tensor(seen, i64);
    at::Tensor d2t = ids - at::arange(static_cast<std::int64_t>(seen.size()), i64);
    at::Tensor t2d = at::zeros({vocab}, at::TensorOptions().dtype(at::kBool));
    t2d.index_fill_(0, ids, true);
    return {d2t, t2d};
}

} // namespace hsring::model
