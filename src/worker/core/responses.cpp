// Answers written by the target (see worker/core/responses.hpp).
#include "worker/core/responses.hpp"

#include "data/splitmix.hpp"
#include "hsring/error.hpp"

#include <algorithm>

namespace hsring::worker {

std::uint64_t answer_seed(std::uint64_t seed, std::uint64_t key, std::uint32_t turn) {
    using data::detail::mix64;
    return mix64(mix64(seed ^ 0x616e73776572ull) ^ mix64(key + 1) ^ (std::uint64_t{turn} << 48));  // "answer"
}

namespace {

// One run of a template: context tokens to copy, or the room of an answer.
struct Run {
    std::size_t begin, end;
    bool answer;
};

std::vector<Run> runs_of(const std::uint8_t* mask, std::size_t n) {
    std::vector<Run> out;
    for (std::size_t i = 0; i < n;) {
        std::size_t j = i;
        while (j < n && mask[j] == mask[i]) ++j;
        out.push_back({i, j, mask[i] != 0});
        i = j;
    }
    return out;
}

} // namespace

std::uint64_t answer_templates(PackedBatch& b, std::uint64_t seed, const AnswerGenerator& generate) {
    const std::size_t n = b.positions.size();
    HSRING_ASSERT(b.keys.size() == n, "answer_templates: {} keys for {} samples", b.keys.size(), n);
    struct Sample {
        std::vector<Run> runs;
        std::size_t next = 0;  // next run to add
        std::size_t offset = 0;
        std::vector<std::int64_t> tokens;
        std::vector<std::uint8_t> mask;
        std::uint32_t turn = 0;
    };
    std::vector<Sample> s(n);
    std::size_t off = 0;
    for (std::size_t i = 0; i < n; ++i) {
        s[i].offset = off;
        s[i].runs = runs_of(b.loss_mask.data() + off, b.lengths[i]);
        off += b.lengths[i];
    }
    std::uint64_t kept = 0;
    for (;;) {
        // Every sample: its context up to its next answer room.
        std::vector<AnswerRequest> requests;
        std::vector<std::size_t> who;
        for (std::size_t i = 0; i < n; ++i) {
            Sample& x = s[i];
            while (x.next < x.runs.size() && !x.runs[x.next].answer) {
                const Run& r = x.runs[x.next++];
                x.tokens.insert(x.tokens.end(), b.tokens.begin() + static_cast<std::ptrdiff_t>(x.offset + r.begin),
                                b.tokens.begin() + static_cast<std::ptrdiff_t>(x.offset + r.end));
                x.mask.insert(x.mask.end(), r.end - r.begin, std::uint8_t{0});
            }
            if (x.next == x.runs.size()) continue;
            const Run& room = x.runs[x.next];
            HSRING_ASSERT(!x.tokens.empty(), "sample {}: an answer room with no prompt before it", b.positions[i]);
            requests.push_back({x.tokens, answer_seed(seed, b.keys[i], x.turn),
                                static_cast<std::uint32_t>(room.end - room.begin)});
            who.push_back(i);
        }
        if (requests.empty()) break;
        const auto answers = generate(requests);
        HSRING_ASSERT(answers.size() == requests.size());
        for (std::size_t k = 0; k < who.size(); ++k) {
            Sample& x = s[who[k]];
            const std::size_t keep = std::min<std::size_t>(answers[k].size(), requests[k].room);
            x.tokens.insert(x.tokens.end(), answers[k].begin(), answers[k].begin() + static_cast<std::ptrdiff_t>(keep));
            x.mask.insert(x.mask.end(), keep, std::uint8_t{1});
            kept += keep;
            ++x.next;
            ++x.turn;
        }
    }
    b.tokens.clear();
    b.loss_mask.clear();
    for (std::size_t i = 0; i < n; ++i) {
        b.lengths[i] = static_cast<std::uint32_t>(s[i].tokens.size());
        for (std::int64_t t : s[i].tokens) b.tokens.push_back(static_cast<std::int32_t>(t));
        b.loss_mask.insert(b.loss_mask.end(), s[i].mask.begin(), s[i].mask.end());
    }
    return kept;
}

} // namespace hsring::worker
