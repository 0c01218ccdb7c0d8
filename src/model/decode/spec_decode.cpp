#include "model/decode/spec_decode.hpp"

#include "hsring/error.hpp"
#include "model/decode/elapsed.hpp"
#include "model/decode/decode_graphs.hpp"
#include "model/drafter/dflash/decode.hpp"
#include "model/drafter/dflash/trainable.hpp"
#include "model/target/kv_cache.hpp"
#include "model/decode/sampling.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>

namespace hsring::model {
namespace {

std::vector<std::int64_t> host_longs(const at::Tensor& t) {
    at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
    return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

// The uniforms of a sequence's drafts: their own stream, so a draft never takes the number the
// target's token at that index uses.
constexpr std::uint64_t kDraftStream = 0xD2AF7C0FFEE5EEDull;

// One prompt's decode state: its row of the target's cache and of the drafter's decode state.
struct SpecRow {
    const GenerateRequest* request = nullptr;
    SpecDecodeOutput* out = nullptr;
    std::int64_t n = 0;      // prompt tokens
    std::int64_t start = 0;  // position of `last`, the last accepted token (not yet run by the target)
    std::int64_t last = 0;
    std::uint64_t draft_seed = 0;
    bool stopped = false;
};

// Up to options.batch prompts decoded together: each step drafts every row's block in one drafter
// call and verifies them in one target forward; each row accepts its own drafts and keeps its own
// length, and leaves the batch when its loop ends.
struct SpecBatch {
    TargetModel& target;
    const SpecDecodeOptions& options;
    DecodeDrafter& draft_state;      // shared by the batches (its weights cast once)
    DecodeGraphs& engine;            // shared too: its graphs outlive a batch
    KVCache& cache;                  // shared too while the batches' rows and capacity match (graphs stay valid)
    SpecDecodeStats& st;
    std::vector<SpecRow> rows;

    bool sampled() const { return options.sampling.temperature > 0; }

    // The tokens of logits [T, vocab] (on the host): greedy, or sampled, where logits row
    // i * stride + j is new token firsts[i] + j of the sequence with seeds[i], drawn with uniform
    // number firsts[i] + j of its stream (generate's draw for that token); other rows are padding.
    std::vector<std::int64_t> pick(const at::Tensor& logits, const std::vector<std::uint64_t>& seeds,
                                   const std::vector<std::int64_t>& firsts, std::int64_t stride) const {
        std::vector<double> u;
        if (sampled()) {
            u.assign(static_cast<std::size_t>(logits.size(0)), 0.5);
            for (std::size_t i = 0; i < seeds.size(); ++i)
                for (std::int64_t j = 0; j < stride && static_cast<std::int64_t>(i) * stride + j < logits.size(0); ++j)
                    u[i * static_cast<std::size_t>(stride) + static_cast<std::size_t>(j)] =
                        SequenceRng::uniform_at(seeds[i], static_cast<std::uint64_t>(firsts[i] + j));
        }
        return host_longs(sample_tokens(logits, options.sampling, u));
    }

    // Records token t of row `row` unless max_new_tokens exist already (the last step's surplus is
    // dropped, as the reference loop drops it); a stop token ends the output after it.
    void emit(SpecRow& row, std::int64_t t) {
        SpecDecodeOutput& out = *row.out;
        const auto count = static_cast<std::int64_t>(out.tokens.size());
        if (row.stopped || count >= options.max_new_tokens) return;
        if (row.n + count >= target.shape().max_position_embeddings) {
            row.stopped = true;  // no position left for this token
            return;
        }
        out.tokens.push_back(t);
        ++st.new_tokens;
        const auto& stops = options.stop_tokens;
        if (std::find(stops.begin(), stops.end(), t) != stops.end()) {
            out.finish = FinishReason::Stop;
            row.stopped = true;
        }
    }

    void run() {
        const ModelShape& shape = target.shape();
        const std::int64_t b = draft_state.max_block();
        const std::vector<int>& ids = draft_state.target_layer_ids();
        const at::Device dev = target.device();
        const at::ScalarType dt = target.dtype();
        std::int64_t capacity = 1;
        std::vector<std::int64_t> prompt, counts;
        for (SpecRow& row : rows) {
            row.n = static_cast<std::int64_t>(row.request->prompt.size());
            row.start = row.n;
            row.draft_seed = data::detail::mix64(row.request->seed ^ kDraftStream);
            row.out->finish = FinishReason::Length;
            capacity = std::max(capacity, row.n + options.max_new_tokens + b);
            prompt.insert(prompt.end(), row.request->prompt.begin(), row.request->prompt.end());
            counts.push_back(row.n);
        }
        capacity = std::min(capacity, shape.max_position_embeddings);
        // The spec_decode call's cache when it fits (the same storage: the engine's graphs stay
        // valid from prompt to prompt), else a new one.
        if (cache.rows() == static_cast<std::int64_t>(rows.size()) && cache.capacity() >= capacity) {
            for (std::int64_t r = 0; r < cache.rows(); ++r) cache.crop(r, 0);
            capacity = cache.capacity();
        } else {
            cache = KVCache(shape, static_cast<std::int64_t>(rows.size()), capacity, dev, dt);
        }
        draft_state.reset(static_cast<std::int64_t>(rows.size()));
        std::vector<at::Tensor> captured(ids.size());
        auto capture = [&](std::size_t i, const at::Tensor& h) { captured[i] = h; };

        auto t0 = Clock::now();
        const at::Tensor logits = target.forward_cached(at::tensor(prompt, at::kLong), counts, cache, false, ids, capture);
        std::vector<std::uint64_t> seeds;
        for (const SpecRow& row : rows) seeds.push_back(row.request->seed);
        const std::vector<std::int64_t> first = pick(logits, seeds, std::vector<std::int64_t>(rows.size(), 0), 1);
        {
            std::vector<std::int64_t> next;  // the token after each prompt token: the prompt's next, then the first new one
            for (std::size_t i = 0; i < rows.size(); ++i) {
                const auto& p = rows[i].request->prompt;
                next.insert(next.end(), p.begin() + 1, p.end());
                next.push_back(first[i]);
            }
            draft_state.extend(at::stack(captured), counts, next);
        }
        st.prefill_seconds += seconds_since(t0);
        for (std::size_t i = 0; i < rows.size(); ++i) {
            st.prompt_tokens += rows[i].n;
            rows[i].last = first[i];
            emit(rows[i], first[i]);
        }

        // z-lab's dflash_generate (dflash/model.py), per row: `start` is the position of the last
        // accepted token; a step runs while start < prompt + max_new_tokens, so one more step runs
        // when exactly max_new_tokens exist (its tokens past the limit are dropped, its acceptance
        // length counts), and a stop token ends the loop after the step that produced it. Every
        // block is B slots. hsring alone also stops where the model has no position left for a block.
        for (;;) {
            std::vector<std::int64_t> keep;
            for (std::size_t i = 0; i < rows.size(); ++i) {
                const SpecRow& row = rows[i];
                if (row.start < row.n + options.max_new_tokens && !row.stopped && row.start + 1 < capacity)
                    keep.push_back(static_cast<std::int64_t>(i));
            }
            if (keep.empty()) break;
            if (keep.size() != rows.size()) {
                cache.keep_rows(keep);
                draft_state.keep_rows(keep);
                std::vector<SpecRow> kept;
                for (std::int64_t i : keep) kept.push_back(rows[static_cast<std::size_t>(i)]);
                rows = std::move(kept);
            }
            // `last` is the token at `start`, not yet run through the target; draft j of a block
            // proposes the token at start + j, the target's verify row j gives the token at
            // start + j + 1. Uniform number i of the seed's stream draws new token i (generate's).
            t0 = Clock::now();
            std::vector<std::int64_t> lasts, ks, firsts;
            std::vector<std::uint64_t> draft_seeds;
            for (std::size_t i = 0; i < rows.size(); ++i) {
                const SpecRow& row = rows[i];
                HSRING_ASSERT(cache.length(static_cast<std::int64_t>(i)) == row.start, "spec_decode: cache {} at position {}",
                              cache.length(static_cast<std::int64_t>(i)), row.start);
                lasts.push_back(row.last);
                ks.push_back(std::min(b, capacity - row.start));
                draft_seeds.push_back(row.draft_seed);
                firsts.push_back(row.start + 1 - row.n);
            }
            // Draft j0 + j of row i is its new token firsts[i] + j0 + j, drawn from the drafts' own stream.
            const PickDrafts pick_drafts(
                [&](const at::Tensor& l, std::int64_t j0, std::int64_t n) {
                    std::vector<std::int64_t> f = firsts;
                    for (auto& x : f) x += j0;
                    return pick(l, draft_seeds, f, n);
                },
                !sampled());
            const std::vector<std::int64_t> drafted = draft_state.draft(lasts, ks, pick_drafts);  // row after row
            std::vector<std::int64_t> block;  // row after row: last, drafts
            for (std::size_t i = 0, d = 0; i < rows.size(); ++i) {
                block.push_back(rows[i].last);
                for (std::int64_t j = 0; j + 1 < ks[i]; ++j) block.push_back(drafted[d++]);
            }
            st.draft_seconds += seconds_since(t0);

            t0 = Clock::now();
            const bool whole = std::all_of(ks.begin(), ks.end(), [&](std::int64_t k) { return k == ks[0]; });
            // The decode engine for one row (the latency case): with several, the cache's storage
            // moves whenever a row leaves, and every move would capture new graphs.
            const at::Tensor verify = options.decode_graphs && whole && rows.size() == 1
                                          ? engine.step(block, ks[0], cache, ids, capture)
                                          : target.forward_cached(at::tensor(block, at::kLong).to(dev), ks, cache, true, ids, capture);
            // The target's token after each slot, per row's segment (sampled draws its own uniforms).
            std::vector<std::int64_t> want;
            if (!sampled()) {
                want = pick(verify, {}, {}, 0);
            } else {
                std::int64_t off = 0;
                for (std::size_t i = 0; i < rows.size(); ++i) {
                    const auto w = pick(verify.narrow(0, off, ks[i]), {rows[i].request->seed}, {firsts[i]}, ks[i]);
                    want.insert(want.end(), w.begin(), w.end());
                    off += ks[i];
                }
            }
            std::vector<std::int64_t> context_index, context_counts, context_next;
            std::vector<std::int64_t> accepted(rows.size());
            std::int64_t off = 0;
            for (std::size_t i = 0; i < rows.size(); ++i) {
                const auto at = [&](std::int64_t j) { return static_cast<std::size_t>(off + j); };
                std::int64_t a = 0;  // drafts equal to the target's token after the tokens before them
                while (a + 1 < ks[i] && block[at(a + 1)] == want[at(a)]) ++a;
                accepted[i] = a;
                for (std::int64_t j = 0; j <= a; ++j) {
                    context_index.push_back(off + j);
                    context_next.push_back(j < a ? block[at(j + 1)] : want[at(a)]);  // the accepted draft, then the target's own
                }
                context_counts.push_back(a + 1);
                off += ks[i];
            }
            // The drafter's context grows by the captured layers of each row's verified tokens.
            draft_state.extend(at::stack(captured).index_select(1, at::tensor(context_index, at::kLong).to(dev)),
                               context_counts, context_next);
            off = 0;
            for (std::size_t i = 0; i < rows.size(); ++i) {
                SpecRow& row = rows[i];
                const std::int64_t a = accepted[i];
                cache.crop(static_cast<std::int64_t>(i), row.start + a + 1);
                row.last = want[static_cast<std::size_t>(off + a)];
                for (std::int64_t j = 1; j <= a; ++j) emit(row, block[static_cast<std::size_t>(off + j)]);
                emit(row, row.last);
                row.out->acceptance_lengths.push_back(a + 1);
                st.accepted_tokens += a + 1;
                ++st.verify_steps;
                row.start += a + 1;
                off += ks[i];
            }
            st.verify_seconds += seconds_since(t0);
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
    DFlashTrainable d(drafter, drafter->config());
    return spec_decode(target, d, prompts, options);
}

SpecDecodeResult spec_decode(TargetModel& target, TrainableDrafter& drafter, const std::vector<GenerateRequest>& prompts,
                             const SpecDecodeOptions& options) {
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
    if (options.batch < 1) fail("speculative decoding: batch must be >= 1 prompts, got {}", options.batch);
    if (options.draft_tokens < 0)
        fail("speculative decoding: draft_tokens must be >= 0 (0 = the drafter type's default), got {}",
             options.draft_tokens);
    // One drafter decode state for every batch: room for the longest prompt's context.
    const std::int64_t batch = std::min<std::int64_t>(options.batch, static_cast<std::int64_t>(prompts.size()));
    std::int64_t longest = 1;
    for (const auto& p : prompts) longest = std::max(longest, static_cast<std::int64_t>(p.prompt.size()));
    const std::unique_ptr<DecodeDrafter> draft_state = drafter.decoder(
        s, target.head(), batch, longest + options.max_new_tokens, target.device(), target.dtype(), options.draft_tokens,
        options.decode_graphs && batch == 1);
    res.block = draft_state->max_block();
    const std::int64_t capacity = std::min(longest + options.max_new_tokens + res.block, s.max_position_embeddings);
    DecodeGraphs engine(target, options.decode_graphs);
    KVCache cache(s, batch, capacity, target.device(), target.dtype());
    for (std::size_t i = 0; i < prompts.size(); i += static_cast<std::size_t>(batch)) {
        SpecBatch run{target, options, *draft_state, engine, cache, res.stats, {}};
        for (std::size_t j = i; j < std::min(prompts.size(), i + static_cast<std::size_t>(batch)); ++j)
            run.rows.push_back(SpecRow{&prompts[j], &res.outputs[j]});
        run.run();
    }
    res.draft_graphs = draft_state->graphs_captured();
    return res;
}

} // namespace hsring::model
