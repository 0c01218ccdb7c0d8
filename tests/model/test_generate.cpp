// The decode engine: KV-cached forward equal to the packed forward, cache crop, sampling that a
// batch cannot change, stop tokens, the generate CLI (suite "generate"); greedy tokens equal to
// transformers' generate() on tiny random Qwen3 and Llama directories (suite "generate_hf", exits
// 77 only where tests/model/hf_reference.py cannot import transformers).
#include "decode_fixture.hpp"
#include "model_test_util.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>

using namespace hsring;
using namespace hsring::model;
using namespace hsring::test;


namespace {

// Prefill two rows of different lengths (prefill_a and 2 tokens), decode both one token a step
// until row a holds 12, then verify a block of 2 on row a alone (speculative verification):
// every logit equals the packed forward's at the same position.
void check_cached_decode(const char* preset, std::int64_t prefill_a) {
    auto m = TargetModel::load(preset_shape(preset), at::kCPU, at::kFloat, 5);
    const auto a = iota_tokens(14, 3), b = iota_tokens(9, 100, 13);
    const at::Tensor full_a = packed_logits(m, a), full_b = packed_logits(m, b);
    KVCache cache(m.shape(), 2, 32, at::kCPU, at::kFloat);
    const auto pa = static_cast<std::size_t>(prefill_a), steps = 12 - pa;
    at::Tensor l = m.forward_cached(tokens_of(cat(slice(a, 0, pa), slice(b, 0, 2))), {prefill_a, 2}, cache);
    CHECK(cache.lengths() == std::vector<std::int64_t>{prefill_a, 2});
    CHECK(at::allclose(l[0], full_a[prefill_a - 1], kRtol, kAtol));
    CHECK(at::allclose(l[1], full_b[1], kRtol, kAtol));
    for (std::size_t s = 0; s < steps; ++s) {
        l = m.forward_cached(tokens_of({a[pa + s], b[2 + s]}), {1, 1}, cache);
        INFO("step " << s);
        CHECK(at::allclose(l[0], full_a[static_cast<std::int64_t>(pa + s)], kRtol, kAtol));
        CHECK(at::allclose(l[1], full_b[static_cast<std::int64_t>(2 + s)], kRtol, kAtol));
    }
    at::Tensor blk = m.forward_cached(tokens_of({a[12], a[13]}), {2, 0}, cache, /*all_logits=*/true);
    CHECK(blk.size(0) == 2);
    CHECK(at::allclose(blk, full_a.narrow(0, 12, 2), kRtol, kAtol));
    CHECK(cache.lengths() == std::vector<std::int64_t>{14, static_cast<std::int64_t>(2 + steps)});
}

} // namespace

TEST_SUITE("generate") {

TEST_CASE("prefill + one-token decode steps in a batch give the packed forward's logits, row by row") {
    check_cached_decode("tiny", 5);
}

// Row a's first decode step already looks past the window (4): the cache's windowed sink path.
TEST_CASE("gpt-oss (window 4, sinks): prefill + decode steps + a block give the packed forward's logits, row by row") {
    check_cached_decode("tiny-gpt-oss", 6);
}

TEST_CASE("forward_cached captures the new tokens' layers: a cached prefill + decode + block equals the packed forward") {
    auto m = TargetModel::load(preset_shape("tiny"), at::kCPU, at::kFloat, 7);
    const auto a = iota_tokens(12, 5), b = iota_tokens(8, 60, 11);
    // Layer 7 is the last (final-normed, as forward reports it); 2 is listed twice.
    const std::vector<int> ids{2, 5, 7, 2};
    auto packed = [&](const std::vector<std::int64_t>& seq) {
        std::vector<at::Tensor> got(ids.size());
        m.forward(tokens_of(seq), {0, static_cast<std::int64_t>(seq.size())}, ids,
                  [&](std::size_t i, const at::Tensor& h) { got[i] = h; });
        return got;
    };
    const auto want_a = packed(a), want_b = packed(b);
    KVCache cache(m.shape(), 2, 16, at::kCPU, at::kFloat);
    // Rows of packed new tokens: a's [a0, a1) and b's [b0, b1), captured in that order.
    auto step = [&](std::size_t a0, std::size_t a1, std::size_t b0, std::size_t b1, bool all_logits) {
        std::vector<at::Tensor> got(ids.size());
        std::vector<std::size_t> order;
        const auto na = static_cast<std::int64_t>(a1 - a0), nb = static_cast<std::int64_t>(b1 - b0);
        m.forward_cached(tokens_of(cat(slice(a, a0, a1), slice(b, b0, b1))), {na, nb}, cache, all_logits, ids,
                         [&](std::size_t i, const at::Tensor& h) {
                             got[i] = h.clone();
                             order.push_back(i);
                         });
        CHECK(order == std::vector<std::size_t>{0, 3, 1, 2});  // layer order, a repeated id reported twice
        for (std::size_t i = 0; i < ids.size(); ++i) {
            INFO("layer " << ids[i] << ", a [" << a0 << ", " << a1 << "), b [" << b0 << ", " << b1 << ")");
            REQUIRE(got[i].size(0) == na + nb);
            CHECK(at::allclose(got[i].narrow(0, 0, na), want_a[i].narrow(0, static_cast<std::int64_t>(a0), na), kRtol,
                               kAtol));
            CHECK(at::allclose(got[i].narrow(0, na, nb), want_b[i].narrow(0, static_cast<std::int64_t>(b0), nb), kRtol,
                               kAtol));
        }
    };
    step(0, 6, 0, 3, false);   // prefill (packed causal attention)
    step(6, 7, 3, 4, false);   // one-token decode
    step(7, 11, 4, 5, true);   // a verified block of 4 beside a decode
    cache.crop(0, 9);          // two of the block's tokens rejected: they come again
    step(9, 12, 5, 8, true);
    CHECK(cache.lengths() == std::vector<std::int64_t>{12, 8});
    // No callback, or an id outside the model: the error names it.
    m.forward_cached(tokens_of({1}), {1, 0}, cache, true);
    CHECK(test::error_of([&] { m.forward_cached(tokens_of({1}), {1, 0}, cache, true, {8}, {}); })
              .find("layer id 8 is out of range") != std::string::npos);
}

TEST_CASE("a cropped row decodes exactly as a row prefilled with the shorter prefix") {
    auto m = TargetModel::load(preset_shape("tiny"), at::kCPU, at::kFloat, 6);
    const auto s = iota_tokens(12, 11, 5), other = iota_tokens(8, 40, 3);
    // Row 0 holds s[0:10] (prefill 6, then a verified block of 4), row 1 another sequence.
    KVCache cache(m.shape(), 2, 16, at::kCPU, at::kFloat);
    m.forward_cached(tokens_of(cat(slice(s, 0, 6), slice(other, 0, 5))), {6, 5}, cache);
    m.forward_cached(tokens_of(slice(s, 6, 10)), {4, 0}, cache, true);
    // Keep 7 of row 0's 10 positions (3 of the block's 4 tokens rejected), then continue with
    // other tokens than the rejected ones.
    cache.crop(0, 7);
    CHECK(cache.lengths() == std::vector<std::int64_t>{7, 5});
    const std::vector<std::int64_t> cont{301, 302, 303};
    at::Tensor got = m.forward_cached(tokens_of(cat(cont, {other[5]})), {3, 1}, cache, true);

    KVCache fresh(m.shape(), 1, 16, at::kCPU, at::kFloat);
    m.forward_cached(tokens_of(slice(s, 0, 7)), {7}, fresh);
    at::Tensor want = m.forward_cached(tokens_of(cont), {3}, fresh, true);
    CHECK(at::allclose(got.narrow(0, 0, 3), want, kRtol, kAtol));
    CHECK(at::allclose(got.narrow(0, 0, 3), packed_logits(m, cat(slice(s, 0, 7), cont)).narrow(0, 7, 3), kRtol, kAtol));
    // The other row was not disturbed by the crop.
    CHECK(at::allclose(got[3], packed_logits(m, slice(other, 0, 6))[5], kRtol, kAtol));

    CHECK(test::error_of([&] { cache.crop(0, 11); }).find("crop only shortens") != std::string::npos);
    CHECK(test::error_of([&] { m.forward_cached(tokens_of(iota_tokens(7, 1)), {7, 0}, cache); })
              .find("do not fit its capacity 16") != std::string::npos);
}

TEST_CASE("keep_rows and append_rows move whole rows with their lengths") {
    auto m = TargetModel::load(preset_shape("tiny"), at::kCPU, at::kFloat, 6);
    const auto a = iota_tokens(6, 1), b = iota_tokens(4, 50), c = iota_tokens(3, 90);
    KVCache cache(m.shape(), 2, 12, at::kCPU, at::kFloat);
    m.forward_cached(tokens_of(cat(a, b)), {6, 4}, cache);
    KVCache more(m.shape(), 1, 12, at::kCPU, at::kFloat);
    m.forward_cached(tokens_of(c), {3}, more);
    cache.keep_rows({1});  // a finished
    cache.append_rows(more);
    CHECK(cache.lengths() == std::vector<std::int64_t>{4, 3});
    at::Tensor l = m.forward_cached(tokens_of({7, 8}), {1, 1}, cache);
    CHECK(at::allclose(l[0], packed_logits(m, cat(b, {7})).select(0, 4), kRtol, kAtol));
    CHECK(at::allclose(l[1], packed_logits(m, cat(c, {8})).select(0, 3), kRtol, kAtol));
}

TEST_CASE("sample_tokens: greedy is argmax; sampling inverts the top-p set's distribution at the row's uniform") {
    // Probabilities 0.5, 0.3, 0.15, 0.05 (token order shuffled).
    at::Tensor p = at::tensor(std::vector<double>{0.15, 0.5, 0.05, 0.3}, at::kFloat);
    at::Tensor logits = at::stack({p.log(), p.log()});
    CHECK(at::equal(sample_tokens(logits, {0.0, 1.0}, {}), at::tensor(std::vector<std::int64_t>{1, 1})));
    auto pick = [&](double top_p, double u0, double u1) {
        at::Tensor t = sample_tokens(logits, {1.0, top_p}, {u0, u1});
        return std::vector<std::int64_t>{t[0].item<std::int64_t>(), t[1].item<std::int64_t>()};
    };
    // Full distribution: cumulative 0.5 (token 1), 0.8 (3), 0.95 (0), 1.0 (2).
    CHECK(pick(1.0, 0.49, 0.51) == std::vector<std::int64_t>{1, 3});
    CHECK(pick(1.0, 0.9, 0.99) == std::vector<std::int64_t>{0, 2});
    // top_p 0.7 keeps tokens 1 and 3 (0.5 < 0.7, then 0.8): renormalised 0.625 / 1.0.
    CHECK(pick(0.7, 0.6, 0.99) == std::vector<std::int64_t>{1, 3});
    // top_p 0.4 keeps token 1 alone.
    CHECK(pick(0.4, 0.0, 0.999) == std::vector<std::int64_t>{1, 1});
    CHECK(test::error_of([&] { sample_tokens(logits, {1.0, 0.0}, {0.1, 0.1}); }).find("top_p") != std::string::npos);
}

TEST_CASE("a sampled sequence gets the same tokens alone or in any batch; another seed gives other tokens") {
    auto m = TargetModel::load(preset_shape("tiny"), at::kCPU, at::kFloat, 8);
    std::vector<GenerateRequest> reqs{{iota_tokens(5, 1), 11}, {iota_tokens(9, 200, 3), 22}, {iota_tokens(2, 77), 33},
                                      {iota_tokens(13, 5, 11), 44}};
    GenerateOptions o;
    o.max_new_tokens = 10;
    o.sampling = {1.0, 0.9};
    o.stop_tokens = {};
    o.batch = 4;
    const auto all = generate(m, reqs, o);
    for (std::size_t i = 0; i < reqs.size(); ++i) CHECK(all.outputs[i].tokens.size() == 10);
    // Alone.
    for (std::size_t i : {1u, 3u}) {
        const auto alone = generate(m, {reqs[i]}, o);
        CHECK(alone.outputs[0].tokens == all.outputs[i].tokens);
    }
    // Two at a time (continuous batching) and in another order.
    o.batch = 2;
    const auto two = generate(m, {reqs[3], reqs[2], reqs[1], reqs[0]}, o);
    for (std::size_t i = 0; i < reqs.size(); ++i) CHECK(two.outputs[3 - i].tokens == all.outputs[i].tokens);
    // A stop token that ends request 0 early changes nothing for the others.
    o.stop_tokens = {all.outputs[0].tokens[2]};
    o.batch = 4;
    const auto stopped = generate(m, reqs, o);
    CHECK(stopped.outputs[0].finish == FinishReason::Stop);
    CHECK(stopped.outputs[0].tokens.size() <= 3);
    CHECK(stopped.outputs[0].tokens.back() == o.stop_tokens[0]);
    // Another seed, the same prompt: other tokens.
    o.stop_tokens = {};
    GenerateRequest other = reqs[1];
    other.seed = 23;
    CHECK(generate(m, {other}, o).outputs[0].tokens != all.outputs[1].tokens);
    // Greedy: independent of the seed.
    o.sampling = {0.0, 1.0};
    CHECK(generate(m, {other}, o).outputs[0].tokens == generate(m, {reqs[1]}, o).outputs[0].tokens);
}

TEST_CASE("generate stops at a stop token, at max_new_tokens and at max positions; bad requests name themselves") {
    ModelShape s = preset_shape("tiny");
    s.max_position_embeddings = 20;
    auto m = TargetModel::load(s, at::kCPU, at::kFloat, 9);
    GenerateOptions o;
    o.max_new_tokens = 8;
    const std::vector<GenerateRequest> reqs{{iota_tokens(4, 3), 0}, {iota_tokens(15, 9), 0}};
    const auto free_run = generate(m, reqs, o);
    CHECK(free_run.outputs[0].tokens.size() == 8);
    CHECK(free_run.outputs[0].finish == FinishReason::Length);
    CHECK(free_run.outputs[1].tokens.size() == 5);  // 15 + 5 = 20 positions
    CHECK(free_run.outputs[1].finish == FinishReason::Length);
    CHECK(free_run.stats.new_tokens == 13);
    // The same greedy tokens as the packed forward's argmax, step by step.
    std::vector<std::int64_t> seq = reqs[0].prompt;
    for (std::int64_t t : free_run.outputs[0].tokens) {
        CHECK(packed_logits(m, seq)[-1].argmax().item<std::int64_t>() == t);
        seq.push_back(t);
    }
    o.stop_tokens = {free_run.outputs[0].tokens[3], 510};
    const auto stopped = generate(m, {reqs[0]}, o);
    std::size_t first = 0;
    while (free_run.outputs[0].tokens[first] != o.stop_tokens[0]) ++first;
    CHECK(stopped.outputs[0].tokens == slice(free_run.outputs[0].tokens, 0, first + 1));
    CHECK(stopped.outputs[0].finish == FinishReason::Stop);

    CHECK(test::error_of([&] { generate(m, {reqs[0], {{}, 0}}, o); }).find("request 1 has an empty prompt") !=
          std::string::npos);
    CHECK(test::error_of([&] { generate(m, {{iota_tokens(20, 1), 0}}, o); }).find("max_position_embeddings 20") !=
          std::string::npos);
    CHECK(test::error_of([&] { generate(m, {{{1, 512}, 0}}, o); }).find("outside the vocabulary") != std::string::npos);
}

TEST_CASE("model_stop_tokens reads eos_token_id from generation_config.json (list) and config.json (int)") {
    TempDir dir;
    ModelShape s = preset_shape("tiny");
    s.source = dir.path().string();
    CHECK(model_stop_tokens(s).empty());
    std::ofstream(dir.path() / "config.json") << R"({"eos_token_id": 7})";
    CHECK(model_stop_tokens(s) == std::vector<std::int64_t>{7});
    std::ofstream(dir.path() / "generation_config.json") << R"({"eos_token_id": [3, 7, 9]})";
    CHECK(model_stop_tokens(s) == std::vector<std::int64_t>{3, 7, 9});
    std::ofstream(dir.path() / "generation_config.json") << R"({"eos_token_id": "x"})";
    CHECK(test::error_of([&] { model_stop_tokens(s); }).find("generation_config.json: eos_token_id") !=
          std::string::npos);
    CHECK(model_stop_tokens(preset_shape("tiny")).empty());
}

} // TEST_SUITE

namespace {

// Random weights with norms drawn in [0.5, 2.5] and a sharper untied LM head: clear argmax
// margins, so a greedy token does not hinge on float noise between two implementations.
TensorMap sharp_weights(const ModelShape& s) {
    TensorMap w = random_target_weights(s, 41, at::kCPU, at::kFloat);
    at::Generator g = cpu_generator(42);
    for (auto& [name, t] : w) {
        if (name.ends_with("norm.weight")) t = at::empty(t.sizes()).uniform_(0.5, 2.5, g);
        if (name == "lm_head.weight") t = t * 4;
        if (name.ends_with("mlp.gate.weight")) t = t * 10;  // a router that decides
    }
    return w;
}

// Greedy generate() on a HF directory of `shape` against transformers' generate(do_sample=False),
// each prompt alone and all of them in one left-padded batch. A stop token (written to
// generation_config.json, read back by model_stop_tokens) ends one prompt early.
void check_greedy_against_transformers(const ModelShape& shape) {
    TempDir dir;
    const auto model_dir = dir.path() / "model";
    save_hf_model_dir(model_dir, shape, sharp_weights(shape));
    ModelShape parsed = resolve_model_shape(model_dir.string());
    auto m = TargetModel::load(parsed, at::kCPU, at::kFloat, 0);
    const std::vector<GenerateRequest> reqs{
        {iota_tokens(5, 1), 0}, {iota_tokens(17, 200, 3), 0}, {{7}, 0}, {iota_tokens(9, 300, 11), 0}};
    GenerateOptions o;
    o.max_new_tokens = 12;
    o.batch = 3;  // 4 prompts, 3 rows: one prompt joins as another leaves
    // Pick a stop token: the first new token at index >= 2 of some prompt that is not among its
    // earlier ones (a random model may repeat one token), so that prompt stops early.
    const auto free_run = generate(m, reqs, o);
    std::int64_t stop = -1;
    std::size_t stopped = 0;
    for (std::size_t r = 0; r < reqs.size() && stop < 0; ++r) {
        const auto& t = free_run.outputs[r].tokens;
        for (std::size_t i = 2; i < t.size() && stop < 0; ++i)
            if (std::find(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(i), t[i]) ==
                t.begin() + static_cast<std::ptrdiff_t>(i)) {
                stop = t[i];
                stopped = r;
            }
    }
    REQUIRE_MESSAGE(stop >= 0, "every prompt repeats one token: no stop token to pick");
    std::ofstream(model_dir / "generation_config.json")
        << nlohmann::json{{"eos_token_id", {stop, shape.vocab_size - 1}}}.dump();
    o.stop_tokens = model_stop_tokens(parsed);
    CHECK(o.stop_tokens == std::vector<std::int64_t>{stop, shape.vocab_size - 1});
    const auto res = generate(m, reqs, o);
    CHECK(res.outputs[stopped].finish == FinishReason::Stop);
    CHECK(res.outputs[stopped].tokens.size() < 12);

    nlohmann::json prompts = nlohmann::json::array();
    for (const auto& r : reqs) prompts.push_back(r.prompt);
    std::ofstream(dir.path() / "prompts.json") << prompts.dump();
    run_reference("generate --model " + q(model_dir) + " --prompts " + q(dir.path() / "prompts.json") +
                  " --max-new-tokens 12 --out " + q(dir.path() / "ref.json"));
    const auto ref = nlohmann::json::parse(slurp(dir.path() / "ref.json"));
    for (std::size_t i = 0; i < reqs.size(); ++i) {
        INFO("prompt " << i << " of " << reqs[i].prompt.size() << " tokens");
        CHECK(res.outputs[i].tokens == ref["alone"][i].get<std::vector<std::int64_t>>());
        CHECK(res.outputs[i].tokens == ref["batched"][i].get<std::vector<std::int64_t>>());
    }
}

} // namespace

TEST_SUITE("generate_hf") {

TEST_CASE("greedy tokens equal transformers' generate(do_sample=False) on a tiny Qwen3, with a stop token") {
    check_greedy_against_transformers(preset_shape("tiny"));
}

// The cached forward (prefill, then one token per row per step) runs the sparse MLP on a few rows.
TEST_CASE("greedy tokens equal transformers' generate(do_sample=False) on a tiny Qwen3-MoE (sparse + dense layers)") {
    check_greedy_against_transformers(preset_shape("tiny-moe"));
}

// Sliding window 4 on layers 0 and 2 (shorter than the prompts), sinks, biases, YaRN: the cached
// decode's windowed attention with sinks against transformers' own cache.
TEST_CASE("greedy tokens equal transformers' generate(do_sample=False) on a tiny gpt-oss (sinks, sliding window)") {
    check_greedy_against_transformers(preset_shape("tiny-gpt-oss"));
}

// Untied: a tiny random model with tied embeddings echoes its last token forever (tied embeddings
// are held to transformers by hf_parity's Llama case).
TEST_CASE("greedy tokens equal transformers' generate(do_sample=False) on a tiny Llama (Llama-3 rope scaling)") {
    ModelShape s = preset_shape("tiny");
    s.arch = "llama";
    s.rope_theta = 10000.0;
    s.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 16};
    check_greedy_against_transformers(s);
}

} // TEST_SUITE

TEST_SUITE("generate") {

TEST_CASE("hsring-model generate --json prints each prompt's new tokens and tokens/s; bad input is one line") {
    TempDir dir;
    const auto prompts = dir.path() / "prompts.jsonl";
    // The second line's prompt is the part before its first loss_mask 1.
    std::ofstream(prompts) << R"({"input_ids": [1, 2, 3]})" << "\n"
                           << R"({"input_ids": [5, 6, 7, 8, 9], "loss_mask": [0, 0, 0, 1, 1]})" << "\n"
                           << R"({"input_ids": [40, 41]})" << "\n";
    const auto out = dir.path() / "out.json", log = dir.path() / "log";
    REQUIRE(run_cli("generate preset:tiny --prompts " + q(prompts) + " --max-new-tokens 6 --batch 2 --preset-seed 3 --json",
                    out, log) == 0);
    const auto j = nlohmann::json::parse(slurp(out));
    REQUIRE(j["outputs"].size() == 3);
    CHECK(j["new_tokens"] == 18);
    CHECK(j["prompt_tokens"] == 8);
    CHECK(j["tokens_per_s"].get<double>() > 0);
    CHECK(j["stop_tokens"].empty());
    auto m = TargetModel::load(preset_shape("tiny"), at::kCPU, at::kFloat, 3);
    GenerateOptions o;
    o.max_new_tokens = 6;
    const auto want = generate(m, {{{1, 2, 3}, 0}, {{5, 6, 7}, 0}, {{40, 41}, 0}}, o);
    for (std::size_t i = 0; i < 3; ++i) {
        CHECK(j["outputs"][i]["output_ids"].get<std::vector<std::int64_t>>() == want.outputs[i].tokens);
        CHECK(j["outputs"][i]["finish"] == "length");
    }
    // Sampling through the CLI: the same tokens with --batch 1 and --batch 3.
    const auto out1 = dir.path() / "s1.json", out3 = dir.path() / "s3.json";
    const std::string sample = "generate preset:tiny --prompts " + q(prompts) + " --max-new-tokens 5 --temperature 0.8 --top-p 0.95 --seed 5 --json --batch ";
    REQUIRE(run_cli(sample + "1", out1, log) == 0);
    REQUIRE(run_cli(sample + "3", out3, log) == 0);
    CHECK(nlohmann::json::parse(slurp(out1))["outputs"] == nlohmann::json::parse(slurp(out3))["outputs"]);

    // Bad input: one line, exit 1.
    std::ofstream(dir.path() / "long.jsonl") << nlohmann::json{{"input_ids", iota_tokens(4096, 1)}}.dump() << "\n";
    CHECK(run_cli("generate preset:tiny --prompts " + q(dir.path() / "long.jsonl"), out, log) == 1);
    const std::string msg = slurp(log);
    CHECK(msg.find("long.jsonl: sample 0: the prompt of 4096 tokens is too long for preset:tiny "
                   "(max_position_embeddings 4096") != std::string::npos);
    // One error line (after the data set's info line), ending the output.
    const auto at = msg.find("hsring-model: ");
    REQUIRE(at != std::string::npos);
    CHECK(msg.find('\n', at) == msg.size() - 1);
    CHECK(run_cli("generate preset:tiny --prompts " + q(dir.path() / "missing.jsonl"), out, log) == 1);
    CHECK(slurp(log).find("missing.jsonl: no such file") != std::string::npos);
    std::ofstream(dir.path() / "empty.jsonl") << R"({"input_ids": []})" << "\n";
    CHECK(run_cli("generate preset:tiny --prompts " + q(dir.path() / "empty.jsonl"), out, log) == 1);
    CHECK(slurp(log).find("empty.jsonl:1: \"input_ids\" is empty") != std::string::npos);
    std::ofstream(dir.path() / "answer_only.jsonl") << R"({"input_ids": [4, 5], "loss_mask": [1, 0]})" << "\n";
    CHECK(run_cli("generate preset:tiny --prompts " + q(dir.path() / "answer_only.jsonl"), out, log) == 1);
    CHECK(slurp(log).find("sample 0: the prompt is empty") != std::string::npos);
    CHECK(run_cli("generate preset:tiny --prompts " + q(prompts) + " --top-p 0", out, log) == 2);
}

TEST_CASE("hsring-model data-generate: prompt + the target's own response per line, loss mask over the response") {
    TempDir dir;
    const auto prompts = dir.path() / "prompts.jsonl";
    std::ofstream(prompts) << R"({"input_ids": [1, 2, 3]})" << "\n"
                           << R"({"input_ids": [5, 6, 7, 8, 9], "loss_mask": [0, 0, 0, 1, 1]})" << "\n"
                           << R"({"input_ids": [40, 41], "loss_mask": [0, 1]})" << "\n";
    const std::string base = "[run]\nname = \"dg\"\nseed = 3\n[topology]\ntargets = [\"cpu\"]\ndrafters = [\"cpu\"]\n"
                             "[ring]\nslots = 4\nslot_tokens = 512\n[target]\nmodel = \"preset:tiny\"\n"
                             "[data]\npath = \"prompts.jsonl\"\n";
    const auto cfg = dir.path() / "dg.toml";
    std::ofstream(cfg) << base << "[generate]\nmax_new_tokens = 6\nbatch = 2\nstop_token_ids = []\n";
    const auto gen = dir.path() / "gen.jsonl", out = dir.path() / "out", log = dir.path() / "log";
    REQUIRE(run_cli("data-generate " + q(cfg) + " --out " + q(gen), out, log) == 0);
    CHECK(slurp(log).find("data generate: 3 of 3 samples, 18 new tokens") != std::string::npos);
    // The run's preset weights ([run] seed 3), greedy: what the decode engine says for each prompt.
    auto m = TargetModel::load(preset_shape("tiny"), at::kCPU, at::kFloat, 3);
    GenerateOptions o;
    o.max_new_tokens = 6;
    const std::vector<std::vector<std::int64_t>> ps{{1, 2, 3}, {5, 6, 7}, {40}};
    const auto want = generate(m, {{ps[0], 0}, {ps[1], 0}, {ps[2], 0}}, o);
    std::ifstream in(gen);
    std::string line;
    for (std::size_t i = 0; i < 3; ++i) {
        REQUIRE(std::getline(in, line));
        const auto j = nlohmann::json::parse(line);
        CHECK(j["input_ids"].get<std::vector<std::int64_t>>() == cat(ps[i], want.outputs[i].tokens));
        std::vector<int> mask(ps[i].size(), 0);
        mask.resize(ps[i].size() + 6, 1);
        CHECK(j["loss_mask"].get<std::vector<int>>() == mask);
    }
    CHECK_FALSE(std::getline(in, line));
    // Sampled: sample i draws from ([generate] seed, i), as `generate --seed` does; again the same file.
    std::ofstream(cfg) << base << "[generate]\nmax_new_tokens = 5\ntemperature = 0.8\ntop_p = 0.95\nseed = 5\n"
                       << "stop_token_ids = []\n";
    const auto s1 = dir.path() / "s1.jsonl", s2 = dir.path() / "s2.jsonl", ref = dir.path() / "ref.json";
    REQUIRE(run_cli("data-generate " + q(cfg) + " --out " + q(s1), out, log) == 0);
    REQUIRE(run_cli("data-generate " + q(cfg) + " --out " + q(s2) + " --prompts " + q(prompts), out, log) == 0);
    CHECK(slurp(s1) == slurp(s2));
    REQUIRE(run_cli("generate preset:tiny --prompts " + q(prompts) + " --max-new-tokens 5 --temperature 0.8 "
                    "--top-p 0.95 --seed 5 --preset-seed 3 --json", ref, log) == 0);
    const auto r = nlohmann::json::parse(slurp(ref));
    std::ifstream in1(s1);
    for (std::size_t i = 0; i < 3 && std::getline(in1, line); ++i) {
        auto ids = nlohmann::json::parse(line)["input_ids"].get<std::vector<std::int64_t>>();
        CHECK(slice(ids, ps[i].size(), ids.size()) == r["outputs"][i]["output_ids"].get<std::vector<std::int64_t>>());
    }
    // A model that declares no eos id, and no [generate] stop_token_ids: one line naming the key.
    std::ofstream(cfg) << base << "[generate]\nmax_new_tokens = 5\n";
    CHECK(run_cli("data-generate " + q(cfg) + " --out " + q(dir.path() / "x.jsonl"), out, log) == 1);
    CHECK(slurp(log).find("[generate] stop_token_ids is not set and the target preset:tiny declares no "
                          "eos_token_id") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir.path() / "x.jsonl"));
    CHECK(run_cli("data-generate " + q(cfg) + " --out " + q(prompts), out, log) == 1);
    CHECK(slurp(log).find("is the prompts' file") != std::string::npos);
    CHECK(run_cli("data-generate " + q(cfg), out, log) == 2);
}

} // TEST_SUITE
