#include "model/spec_decode.hpp"

#include "hsring/error.hpp"
#include "model/dflash_decode.hpp"
#include "model/kv_cache.hpp"
#include "model/sampling.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>

namespace hsring::model {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<std::int64_t> host_longs(const at::Tensor& t) {
    at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
    return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

// The uniforms of a sequence's drafts: their own stream, so a draft never takes the number the
// target's token at that index uses.
constexpr std::uint64_t kDraftStream = 0xD2AF7C0FFEE5EEDull;

// One prompt's decode state: the target's cache row, the drafter's cached context.
struct Sequence {
    TargetModel& target;
    DFlashDrafter& drafter;
    const SpecDecodeOptions& options;
    const GenerateRequest& request;
    DFlashDecodeState& draft_state;  // shared by the prompts (its weights cast once), emptied per prompt
    SpecDecodeOutput& out;
    SpecDecodeStats& st;

    // Tokens for logits [r, vocab] whose row j is new token `first + j` of the sequence: greedy, or
    // sampled with uniform number first + j of `seed`'s stream (generate's i-th draw for token i).
    at::Tensor pick(const at::Tensor& logits, std::uint64_t seed, std::int64_t first) const {
        std::vector<double> u;
        if (options.sampling.temperature > 0)
            for (std::int64_t j = 0; j < logits.size(0); ++j)
                u.push_back(SequenceRng::uniform_at(seed, static_cast<std::uint64_t>(first + j)));
        return sample_tokens(logits, options.sampling, u);
    }

    // Records token t unless max_new_tokens exist already (the last step's surplus is dropped, as the
    // reference loop drops it); a stop token ends the output after it.
    void emit(std::int64_t t) {
        const auto count = static_cast<std::int64_t>(out.tokens.size());
        if (stopped || count >= options.max_new_tokens) return;
        if (static_cast<std::int64_t>(request.prompt.size()) + count >= target.shape().max_position_embeddings) {
            stopped = true;  // no position left for this token
            return;
        }
        out.tokens.push_back(t);
        ++st.new_tokens;
        const auto& stops = options.stop_tokens;
        if (std::find(stops.begin(), stops.end(), t) != stops.end()) {
            out.finish = FinishReason::Stop;
            stopped = true;
        }
    }
    bool stopped = false;

    void run() {
        const ModelShape& shape = target.shape();
        const DFlashConfig& c = drafter->config();
        const std::vector<std::int64_t>& prompt = request.prompt;
        const std::int64_t b = c.block_size, n = static_cast<std::int64_t>(prompt.size());
        out.finish = FinishReason::Length;
        const std::vector<int>& ids = c.target_layer_ids;
        const at::Device dev = target.device();
        const at::ScalarType dt = target.dtype();
        const TargetHead head = target.head();
        const std::uint64_t draft_seed = data::detail::mix64(request.seed ^ kDraftStream);
        const std::int64_t capacity = std::min(n + options.max_new_tokens + b, shape.max_position_embeddings);
        KVCache cache(shape, 1, capacity, dev, dt);
        draft_state.crop(0);
        std::vector<at::Tensor> captured(ids.size());
        auto capture = [&](std::size_t i, const at::Tensor& h) { captured[i] = h; };
        // The drafter's context grows by the captured layers of the first `rows` tokens just run.
        auto keep_context = [&](std::int64_t rows) {
            std::vector<at::Tensor> layers;
            for (const at::Tensor& h : captured) layers.push_back(h.narrow(0, 0, rows));
            draft_state.extend(at::stack(layers));
        };

        auto t0 = Clock::now();
        at::Tensor logits = target.forward_cached(at::tensor(prompt, at::kLong), {n}, cache, false, ids, capture);
        keep_context(n);
        std::int64_t last = pick(logits, request.seed, 0).item<std::int64_t>();
        st.prompt_tokens += n;
        st.prefill_seconds += seconds_since(t0);
        emit(last);

        // z-lab's dflash_generate (dflash/model.py): `start` is the position of the last accepted
        // token; a step runs while start < prompt + max_new_tokens, so one more step runs when
        // exactly max_new_tokens exist (its tokens past the limit are dropped, its acceptance length
        // counts), and a stop token ends the loop after the step that produced it. Every block is B
        // slots. hsring alone also stops where the model has no position left for a block.
        const std::int64_t max_length = n + options.max_new_tokens;
        const auto longs = at::TensorOptions().device(dev).dtype(at::kLong);
        std::int64_t start = n;
        while (start < max_length && !stopped && start + 1 < capacity) {
            HSRING_ASSERT(cache.length(0) == start, "spec_decode: cache {} at position {}", cache.length(0), start);
            // `last` is the token at `start`, not yet run through the target; draft j of the block
            // proposes the token at start + j, the target's verify row j gives the token at start + j + 1.
            // Uniform number i of the seed's stream draws new token i (generate's i-th draw).
            const std::int64_t m = start + 1 - n;
            t0 = Clock::now();
            const std::int64_t k = std::min(b, capacity - start);
            at::Tensor block = at::full({1}, last, longs);
            if (k > 1) {
                const at::Tensor rows = draft_state.draft(last, k).narrow(0, 1, k - 1);
                block = at::cat({block, pick(at::matmul(rows, head.lm_head.t()), draft_seed, m)});
            }
            const std::vector<std::int64_t> draft = host_longs(block);
            st.draft_seconds += seconds_since(t0);

            t0 = Clock::now();
            at::Tensor verify = target.forward_cached(block, {k}, cache, true, ids, capture);
            const std::vector<std::int64_t> want = host_longs(pick(verify, request.seed, m));
            std::int64_t accepted = 0;  // drafts equal to the target's token after the tokens before them
            while (accepted + 1 < k && draft[static_cast<std::size_t>(accepted + 1)] == want[static_cast<std::size_t>(accepted)])
                ++accepted;
            keep_context(accepted + 1);
            cache.crop(0, start + accepted + 1);
            ++st.verify_steps;
            st.verify_seconds += seconds_since(t0);
            last = want[static_cast<std::size_t>(accepted)];
            for (std::int64_t j = 1; j <= accepted; ++j) emit(draft[static_cast<std::size_t>(j)]);
            emit(last);
            out.acceptance_lengths.push_back(accepted + 1);
            st.accepted_tokens += accepted + 1;
            start += accepted + 1;
        }
    }
};

} // namespace

at::Tensor draft_hidden(DFlashDrafter& drafter, const TargetHead& head, const at::Tensor& context, std::int64_t last,
                        std::int64_t start, at::ScalarType dtype, std::int64_t block) {
    const DFlashConfig& c = drafter->config();
    const std::int64_t b = block > 0 ? block : c.block_size;
    HSRING_ASSERT(context.dim() == 3 && context.size(1) > start, "draft_hidden: context {} for anchor {}",
                  shape_str(context.sizes()), start);
    const auto longs = at::TensorOptions().device(context.device()).dtype(at::kLong);
    DFlashBlocks blocks;
    blocks.block_size = b;
    blocks.seq_begin = {0};
    blocks.anchors = {start};
    blocks.block_tokens = at::cat({at::full({1}, last, longs), at::full({b - 1}, c.mask_token_id, longs)});
    blocks.block_positions = at::arange(start, start + b, longs);
    blocks.context_positions = at::arange(start + 1, longs);
    DFlashInputs in;
    in.context = context.narrow(1, 0, start + 1);
    in.block_embeds = head.embed.index_select(0, blocks.block_tokens);
    in.blocks = &blocks;
    in.compute_dtype = dtype;
    return drafter->forward(in);
}

void check_spec_decode(const TargetModel& target, DFlashDrafter& drafter) {
    const DFlashConfig& c = drafter->config();
    const ModelShape& s = target.shape();
    if (c.hidden_size != s.hidden_size || c.vocab_size != s.vocab_size)
        fail("speculative decoding: the drafter reads hidden size {} and vocabulary {}, the target {} has {} and {}",
             c.hidden_size, c.vocab_size, s.source, s.hidden_size, s.vocab_size);
    if (c.target_layer_ids.empty()) fail("speculative decoding: the drafter has no target_layer_ids");
    for (int k : c.target_layer_ids)
        if (k < 0 || k >= s.num_layers)
            fail("speculative decoding: target layer id {} is out of range for {} ({} layers)", k, s.source,
                 s.num_layers);
    if (c.mask_token_id < 0 || c.mask_token_id >= s.vocab_size)
        fail("speculative decoding: mask_token_id {} is outside the target's vocabulary [0, {})", c.mask_token_id,
             s.vocab_size);
    if (c.block_size < 2) fail("speculative decoding: block_size {} drafts nothing", c.block_size);
}

SpecDecodeResult spec_decode(TargetModel& target, DFlashDrafter& drafter, const std::vector<GenerateRequest>& prompts,
                             const SpecDecodeOptions& options) {
    check_spec_decode(target, drafter);
    const ModelShape& s = target.shape();
    if (options.max_new_tokens < 0)
        fail("speculative decoding: max_new_tokens must be >= 0, got {}", options.max_new_tokens);
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        const auto& p = prompts[i].prompt;
        if (p.empty()) fail("speculative decoding: prompt {} is empty (at least one token is needed)", i);
        if (static_cast<std::int64_t>(p.size()) >= s.max_position_embeddings)
            fail("speculative decoding: prompt {} of {} tokens leaves no room for a new token under the model's "
                 "max_position_embeddings {} ({})",
                 i, p.size(), s.max_position_embeddings, s.source);
    }
    check_sampling(options.sampling);
    at::NoGradGuard no_grad;
    SpecDecodeResult res;
    res.outputs.resize(prompts.size());
    if (options.max_new_tokens == 0) return res;
    // One drafter decode state for every prompt: room for the longest one's context.
    std::int64_t capacity = 1;
    for (const auto& p : prompts)
        capacity = std::max(capacity, static_cast<std::int64_t>(p.prompt.size()) + options.max_new_tokens +
                                          drafter->config().block_size);
    capacity = std::min(capacity, s.max_position_embeddings);
    DFlashDecodeState draft_state(drafter, target.head(), capacity, target.device(), target.dtype());
    for (std::size_t i = 0; i < prompts.size(); ++i)
        Sequence{target, drafter, options, prompts[i], draft_state, res.outputs[i], res.stats}.run();
    return res;
}

} // namespace hsring::model
