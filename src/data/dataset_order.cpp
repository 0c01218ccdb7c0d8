// Per-epoch sample order (see epoch_order in hsring/dataset.hpp).
#include "hsring/dataset.hpp"

#include "splitmix.hpp"

#include "hsring/error.hpp"

#include <limits>
#include <numeric>
#include <utility>

namespace hsring::data {

std::vector<std::uint32_t> epoch_order(std::size_t n, std::uint64_t seed, std::uint32_t epoch, bool shuffle) {
    HSRING_ASSERT(n <= std::numeric_limits<std::uint32_t>::max(), "{} samples do not fit uint32 ids", n);
    std::vector<std::uint32_t> order(n);
    std::iota(order.begin(), order.end(), std::uint32_t{0});
    if (!shuffle || n < 2) return order;
    // One independent stream per (seed, epoch): mix both so that neighbouring seeds and epochs
    // share no state.
    detail::SplitMix64 rng(detail::mix64(seed) ^ detail::mix64(0x45504f4348ull + epoch));  // "EPOCH"
    for (std::size_t i = n - 1; i > 0; --i) {  // Fisher-Yates, from the back
        const auto j = static_cast<std::size_t>(rng.below(i + 1));
        std::swap(order[i], order[j]);
    }
    return order;
}

} // namespace hsring::data
