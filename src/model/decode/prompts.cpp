// Prompts of a JSONL data set (see model/decode/prompts.hpp).
#include "model/decode/prompts.hpp"

#include "data/splitmix.hpp"
#include "hsring/dataset.hpp"
#include "hsring/error.hpp"

#include <algorithm>

namespace hsring::model {

std::vector<GenerateRequest> read_prompts(const std::filesystem::path& prompts, const std::string& model, const ModelShape& shape,
                                          std::uint64_t seed) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(prompts, ec))
        fail("{}: {} (--prompts must name a JSONL file: {{\"input_ids\": [...]}} per line, optional \"loss_mask\": "
             "the prompt is the part before its first 1)",
             prompts.string(), std::filesystem::exists(prompts, ec) ? "not a regular file" : "no such file");
    const data::Dataset ds = data::Dataset::load(prompts, {OnBadLine::Fail, 0, shape.vocab_size});
    std::vector<GenerateRequest> out;
    for (std::size_t i = 0; i < ds.size(); ++i) {
        auto toks = ds.tokens(i);
        auto mask = ds.loss_mask(i);
        std::size_t n = 0;
        while (n < toks.size() && mask[n] == 0) ++n;
        // A line without loss_mask reads as all ones (and so does an all-ones mask): it holds no
        // answer, the whole line is the prompt.
        if (std::all_of(mask.begin(), mask.end(), [](std::uint8_t m) { return m == 1; })) n = toks.size();
        if (n == 0)
            fail("{}: sample {}: the prompt is empty (its loss_mask starts with 1; the prompt is the part before the "
                 "first 1)",
                 prompts.string(), i);
        if (static_cast<std::int64_t>(n) >= shape.max_position_embeddings)
            fail("{}: sample {}: the prompt of {} tokens is too long for {} (max_position_embeddings {}, and one "
                 "new token needs a position)",
                 prompts.string(), i, n, model, shape.max_position_embeddings);
        GenerateRequest r;
        r.prompt.assign(toks.begin(), toks.begin() + static_cast<std::ptrdiff_t>(n));
        r.seed = data::detail::mix64(seed ^ data::detail::mix64(i + data::detail::kGolden));
        out.push_back(std::move(r));
    }
    return out;
}

} // namespace hsring::model
