// The packer's plan (see hsring/slot_plan.hpp).
#include "hsring/slot_plan.hpp"

#include "hsring/error.hpp"

#include <algorithm>

namespace hsring {

std::vector<std::uint64_t> plan_slots(const data::Dataset& data, std::uint64_t seed, bool shuffle, std::uint32_t nnodes,
                                      std::uint32_t node_rank, std::uint32_t epochs, std::uint64_t slot_tokens,
                                      std::uint32_t max_samples) {
    HSRING_ASSERT(slot_tokens > 0 && max_samples > 0);
    data::ShardOrder order(data.size(), seed, shuffle, nnodes, node_rank);
    const std::uint64_t share = order.share();
    std::vector<std::uint64_t> first;
    for (std::uint64_t e = 0; e < epochs; ++e) {
        std::uint64_t tokens = 0, samples = 0;
        for (std::uint64_t p = e * share; p < (e + 1) * share; ++p) {
            const std::uint64_t len = data.length(order.sample_of(p));
            if (len > slot_tokens)
                fail("{}: a sample of {} tokens does not fit a slot of {} tokens ([ring] slot_tokens)", data.source(),
                     len, slot_tokens);
            // Each epoch starts a slot; a slot ends before the sample that would overflow it.
            if (p == e * share || tokens + len > slot_tokens || samples == max_samples) {
                first.push_back(p);
                tokens = samples = 0;
            }
            tokens += len;
            ++samples;
        }
    }
    first.push_back(share * epochs);
    return first;
}

std::vector<std::pair<std::size_t, std::size_t>> split_micro_batches(std::span<const std::uint64_t> lengths,
                                                                     std::uint64_t limit) {
    limit = std::max<std::uint64_t>(1, limit);
    std::vector<std::pair<std::size_t, std::size_t>> out;
    for (std::size_t first = 0; first < lengths.size();) {
        std::size_t last = first + 1;
        std::uint64_t tokens = lengths[first];
        while (last < lengths.size() && tokens + lengths[last] <= limit) tokens += lengths[last++];
        out.emplace_back(first, last);
        first = last;
    }
    return out;
}

} // namespace hsring
