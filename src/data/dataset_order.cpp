// Per-epoch sample order (see epoch_order in hsring/dataset.hpp).
#include "hsring/dataset.hpp"

#include "splitmix.hpp"

#include "hsring/error.hpp"

#include <algorithm>
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

ShardOrder::ShardOrder(std::uint64_t n, std::uint64_t seed, bool shuffle, std::uint32_t nnodes, std::uint32_t node)
    : n_(n), seed_(seed), shuffle_(shuffle), nnodes_(nnodes), node_(node), share_(shard_size(n, nnodes, node)) {
    HSRING_ASSERT(nnodes > 0 && node < nnodes, "machine {} of {}", node, nnodes);
    if (share_ == 0)
        fail("the data set has {} samples, fewer than the {} machines of the run: machine {} would get none", n, nnodes,
             node);
}

std::uint32_t ShardOrder::sample_of(std::uint64_t pos) {
    const std::uint32_t epoch = epoch_of(pos);
    auto it = std::find_if(cache_.begin(), cache_.end(), [&](const auto& e) { return e.first == epoch; });
    if (it == cache_.end()) {
        if (cache_.size() >= 3) cache_.erase(cache_.begin());
        cache_.emplace_back(epoch, epoch_order(n_, seed_, epoch, shuffle_));
        it = cache_.end() - 1;
    }
    return it->second[node_ + (pos % share_) * nnodes_];
}

} // namespace hsring::data
