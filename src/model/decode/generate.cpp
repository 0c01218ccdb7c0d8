#include "model/decode/generate.hpp"

#include "hsring/error.hpp"
#include "model/decode/elapsed.hpp"
#include "model/decode/decode_graphs.hpp"
#include "model/target/kv_cache.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <optional>

namespace hsring::model {

namespace {

// A request in flight: its KV cache row is its place in `Batch::rows`.
struct Row {
    std::size_t request = 0;
    SequenceRng rng{0};
    std::int64_t next_token = 0;  // emitted, not yet run through the model
};

struct Batch {
    const TargetModel& model;
    const std::vector<GenerateRequest>& requests;
    const GenerateOptions& options;
    std::vector<GenerateOutput>& outputs;
    std::vector<Row> rows;

    // Samples one token per row from logits [rows, vocab] and records it; returns which rows
    // are still running.
    std::vector<bool> emit(const at::Tensor& logits, std::vector<Row>& rs) {
        std::vector<double> u;
        if (options.sampling.temperature > 0)
            for (auto& r : rs) u.push_back(r.rng.uniform());  // one draw per token: batch-independent
        at::Tensor picked = sample_tokens(logits, options.sampling, u).to(at::kCPU).contiguous();
        const auto* tok = picked.data_ptr<std::int64_t>();
        const std::int64_t max_pos = model.shape().max_position_embeddings;
        std::vector<bool> running;
        for (std::size_t i = 0; i < rs.size(); ++i) {
            GenerateOutput& out = outputs[rs[i].request];
            out.tokens.push_back(tok[i]);
            rs[i].next_token = tok[i];
            const auto& stops = options.stop_tokens;
            const auto length = static_cast<std::int64_t>(requests[rs[i].request].prompt.size() + out.tokens.size());
            if (std::find(stops.begin(), stops.end(), tok[i]) != stops.end()) out.finish = FinishReason::Stop;
            else if (static_cast<std::int64_t>(out.tokens.size()) >= options.max_new_tokens || length >= max_pos)
                out.finish = FinishReason::Length;
            else {
                running.push_back(true);
                continue;
            }
            running.push_back(false);
        }
        return running;
    }
};

void check_requests(const TargetModel& model, const std::vector<GenerateRequest>& requests,
                    const GenerateOptions& options) {
    const ModelShape& s = model.shape();
    if (options.max_new_tokens < 0) fail("generate: max_new_tokens must be >= 0, got {}", options.max_new_tokens);
    if (options.batch < 1) fail("generate: batch must be >= 1, got {}", options.batch);
    check_sampling(options.sampling);
    for (std::size_t i = 0; i < requests.size(); ++i) {
        const auto& p = requests[i].prompt;
        if (p.empty()) fail("generate: request {} has an empty prompt (at least one token is needed)", i);
        if (static_cast<std::int64_t>(p.size()) >= s.max_position_embeddings)
            fail("generate: request {}: the prompt of {} tokens leaves no room for a new token under the model's "
                 "max_position_embeddings {} ({})",
                 i, p.size(), s.max_position_embeddings, s.source);
        for (std::size_t j = 0; j < p.size(); ++j)
            if (p[j] < 0 || p[j] >= s.vocab_size)
                fail("generate: request {}: token {} at position {} is outside the vocabulary [0, {})", i, p[j], j,
                     s.vocab_size);
    }
}

} // namespace

const char* to_string(FinishReason r) { return r == FinishReason::Stop ? "stop" : "length"; }

GenerateResult generate(TargetModel& model, const std::vector<GenerateRequest>& requests,
                        const GenerateOptions& options) {
    check_requests(model, requests, options);
    GenerateResult res;
    res.outputs.resize(requests.size());
    if (requests.empty() || options.max_new_tokens == 0) return res;
    const ModelShape& shape = model.shape();
    // One capacity for every row (rows of one cache share it): the longest prompt + new tokens.
    std::int64_t capacity = 1;
    for (const auto& r : requests)
        capacity = std::max(capacity, static_cast<std::int64_t>(r.prompt.size()) + options.max_new_tokens);
    capacity = std::min(capacity, shape.max_position_embeddings);

    at::NoGradGuard no_grad;
    KVCache cache(shape, 0, capacity, model.device(), model.dtype());
    DecodeGraphs engine(model, options.decode_graphs);
    // One request at a time: every request's row in the same storage, so the decode engine's
    // graphs (which write into it) serve them all.
    std::optional<KVCache> spare;
    Batch batch{model, requests, options, res.outputs, {}};
    GenerateStats& st = res.stats;
    std::size_t next = 0;
    while (true) {
        // Admit waiting requests into the free rows: one packed prefill of their prompts.
        if (static_cast<std::int64_t>(batch.rows.size()) < options.batch && next < requests.size()) {
            const auto t0 = Clock::now();
            const std::size_t k =
                std::min(static_cast<std::size_t>(options.batch) - batch.rows.size(), requests.size() - next);
            std::vector<std::int64_t> flat, counts;
            std::vector<Row> admitted;
            for (std::size_t i = next; i < next + k; ++i) {
                const auto& p = requests[i].prompt;
                flat.insert(flat.end(), p.begin(), p.end());
                counts.push_back(static_cast<std::int64_t>(p.size()));
                admitted.push_back({i, SequenceRng(requests[i].seed), 0});
            }
            next += k;
            KVCache fresh = [&] {
                if (k != 1 || cache.rows() != 0) return KVCache(shape, static_cast<std::int64_t>(k), capacity, model.device(), model.dtype());
                if (!spare) spare.emplace(shape, 1, capacity, model.device(), model.dtype());
                spare->crop(0, 0);
                return *spare;  // shares its storage
            }();
            at::Tensor logits = model.forward_cached(at::tensor(flat, at::kLong), counts, fresh);
            const std::vector<bool> running = batch.emit(logits, admitted);
            std::vector<std::int64_t> keep;
            for (std::size_t i = 0; i < k; ++i)
                if (running[i]) {
                    keep.push_back(static_cast<std::int64_t>(i));
                    batch.rows.push_back(admitted[i]);
                }
            fresh.keep_rows(keep);
            cache.append_rows(fresh);
            st.prompt_tokens += static_cast<std::int64_t>(flat.size());
            st.new_tokens += static_cast<std::int64_t>(k);
            ++st.prefills;
            st.prefill_seconds += seconds_since(t0);
            continue;  // fill every free row before the next decode step
        }
        if (batch.rows.empty()) break;
        // One decode step: every running row feeds its last token.
        const auto t0 = Clock::now();
        std::vector<std::int64_t> last;
        for (const Row& r : batch.rows) last.push_back(r.next_token);
        // The decode engine at batch 1 (the latency case): with several rows the cache's storage
        // moves whenever a row leaves, and every move would capture new graphs.
        at::Tensor logits = options.decode_graphs && options.batch == 1
                                ? engine.step(last, 1, cache)
                                : model.forward_cached(at::tensor(last, at::kLong),
                                                       std::vector<std::int64_t>(last.size(), 1), cache);
        const std::vector<bool> running = batch.emit(logits, batch.rows);
        std::vector<std::int64_t> keep;
        std::vector<Row> kept;
        for (std::size_t i = 0; i < running.size(); ++i)
            if (running[i]) {
                keep.push_back(static_cast<std::int64_t>(i));
                kept.push_back(batch.rows[i]);
            }
        // A finished row leaves at once: the next steps no longer compute it.
        cache.keep_rows(keep);
        batch.rows = std::move(kept);
        st.new_tokens += static_cast<std::int64_t>(last.size());
        ++st.decode_steps;
        st.decode_seconds += seconds_since(t0);
    }
    return res;
}

} // namespace hsring::model
