// Speculative decoding: a random or perfect drafter's output is greedy/sampled generate's, the
// drafter's decode state (cached context keys/values) drafts what the whole-context recompute
// drafts, and the spec-decode CLI (suite "generate").
#include "spec_decode_fixture.hpp"
#include "model_test_util.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>

using namespace hsring;
using namespace hsring::model;
using namespace hsring::test;

TEST_SUITE("generate") {

TEST_CASE("spec_decode: a random drafter's output is greedy generate's, each step accepting 1..B tokens") {
    auto m = TargetModel::load(preset_shape("tiny"), at::kCPU, at::kFloat, 12);
    DFlashDrafter d(dflash_config_for(m.shape(), 1, 4, -1, {1, 4, 6}), 3, at::kCPU);
    const std::vector<GenerateRequest> reqs = spec_prompts();
    GenerateOptions go = generate_options(13);
    SpecDecodeOptions so = spec_options_like(go);
    const auto plain = generate(m, reqs, go);
    const auto spec = spec_decode(m, d, reqs, so);
    std::int64_t steps = 0;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
        INFO("prompt " << i);
        const auto& out = spec.outputs[i];
        CHECK(out.tokens == plain.outputs[i].tokens);
        CHECK(out.finish == FinishReason::Length);
        // The prefill's token, then each step's acceptance length (1..B). z-lab's rule: a step runs
        // while at most 13 tokens exist, so the last one starts at <= 13 and ends past 13.
        std::int64_t sum = 1;
        for (std::int64_t a : out.acceptance_lengths) {
            CHECK(a >= 1);
            CHECK(a <= 4);
            sum += a;
        }
        CHECK(sum > 13);
        CHECK(sum - out.acceptance_lengths.back() <= 13);
        steps += static_cast<std::int64_t>(out.acceptance_lengths.size());
    }
    CHECK(spec.stats.verify_steps == steps);
    CHECK(spec.stats.new_tokens == 39);
    CHECK(spec.stats.tau() >= 1.0);
    // Decoded as rows of one batch (prompts of 5, 17 and 1 tokens; the 1-token one alone in the
    // second batch of two): every prompt's tokens and acceptance lengths are the same.
    auto same_as_alone = [&](const SpecDecodeResult& batched, const SpecDecodeResult& alone) {
        for (std::size_t i = 0; i < reqs.size(); ++i) {
            INFO("prompt " << i);
            CHECK(batched.outputs[i].tokens == alone.outputs[i].tokens);
            CHECK(batched.outputs[i].acceptance_lengths == alone.outputs[i].acceptance_lengths);
            CHECK(batched.outputs[i].finish == alone.outputs[i].finish);
        }
        CHECK(batched.stats.verify_steps == alone.stats.verify_steps);
        CHECK(batched.stats.new_tokens == alone.stats.new_tokens);
    };
    for (std::int64_t batch : {2, 3, 8}) {
        INFO("batch " << batch);
        SpecDecodeOptions bo = so;
        bo.batch = batch;
        same_as_alone(spec_decode(m, d, reqs, bo), spec);
    }
    // A stop token and max positions end it as they end generate.
    auto short_m = short_tiny_target();
    go.stop_tokens = so.stop_tokens = {plain.outputs[0].tokens[5]};
    const auto plain2 = generate(short_m, reqs, go);
    const auto spec2 = spec_decode(short_m, d, reqs, so);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
        CHECK(spec2.outputs[i].tokens == plain2.outputs[i].tokens);
        CHECK(spec2.outputs[i].finish == plain2.outputs[i].finish);
        // The loop ends after the step that gave the stop token (or where positions run out).
        std::int64_t sum = 1;
        for (std::int64_t a : spec2.outputs[i].acceptance_lengths) sum += a;
        const auto size = static_cast<std::int64_t>(spec2.outputs[i].tokens.size());
        CHECK(sum >= size);
        if (spec2.outputs[i].finish == FinishReason::Stop && size > 1)
            CHECK(sum - spec2.outputs[i].acceptance_lengths.back() < size);
    }
    if (spec2.outputs[1].finish == FinishReason::Length) CHECK(spec2.outputs[1].tokens.size() == 7);  // 24 positions
    {  // rows that stop or run out of positions (short last blocks) leave the batch; the others go on
        SpecDecodeOptions bo = so;
        bo.batch = 3;
        same_as_alone(spec_decode(short_m, d, reqs, bo), spec2);
    }
    so.batch = 0;
    CHECK(test::error_of([&] { spec_decode(m, d, reqs, so); }).find("batch must be >= 1") != std::string::npos);
    so.batch = 1;

    // A drafter for another target.
    ModelShape wide = preset_shape("tiny");
    wide.hidden_size = 96;
    DFlashDrafter other(dflash_config_for(wide, 1, 4, -1, {1, 4, 6}), 3, at::kCPU);
    CHECK(test::error_of([&] { spec_decode(m, other, reqs, so); }).find("hidden size 96") != std::string::npos);
}

TEST_CASE("draft_hidden over the context before an anchor equals the drafter's block at that anchor of the whole sequence") {
    auto m = TargetModel::load(preset_shape("tiny"), at::kCPU, at::kFloat, 12);
    const DFlashConfig cfg = dflash_config_for(m.shape(), 1, 4, -1, {1, 4, 6});
    DFlashDrafter d = perturbed_drafter(cfg, 8);
    const auto seq = iota_tokens(20, 9, 5);
    DFlashBatch batch;
    batch.tokens = tokens_of(seq);
    batch.loss_mask = at::ones({20});
    batch.cu_seqlens = {0, 20};
    batch.hidden = captured_layers(m, seq, cfg.target_layer_ids);
    DFlashLossOptions opts;
    opts.compute_dtype = at::kFloat;
    at::NoGradGuard ng;
    for (std::int64_t a : {1, 7, 16}) {
        INFO("anchor " << a);
        DFlashBlocks blocks = dflash_blocks_at(batch.tokens, batch.loss_mask, batch.cu_seqlens, 4, cfg.mask_token_id, {a}, 0);
        const at::Tensor want = dflash_hidden(d, m.head(), batch, blocks, opts);
        // Only rows < a are read: the rest may hold anything.
        at::Tensor ctx = batch.hidden.clone();
        ctx.narrow(1, a, 20 - a).fill_(7.0);
        const at::Tensor got = draft_hidden(d, m.head(), ctx, seq[static_cast<std::size_t>(a)], a, at::kFloat);
        CHECK(at::allclose(got, want, kRtol, kAtol));
        CHECK(at::allclose(draft_hidden(d, m.head(), ctx.narrow(1, 0, a + 1), seq[static_cast<std::size_t>(a)], a, at::kFloat), want,
                           kRtol, kAtol));
    }
}

TEST_CASE("the drafter's decode state (cached context keys/values) drafts what draft_hidden drafts, through extends and crops") {
    auto m = TargetModel::load(preset_shape("tiny"), at::kCPU, at::kFloat, 12);
    const DFlashConfig cfg = dflash_config_for(m.shape(), 2, 4, -1, {1, 4, 6});
    DFlashDrafter d = perturbed_drafter(cfg, 9);
    const auto seq = iota_tokens(24, 11, 5);
    const at::Tensor ctx = captured_layers(m, seq, cfg.target_layer_ids);  // [3, 24, H]
    at::NoGradGuard ng;
    DFlashDecodeState state(d, m.head(), 1, 24, at::kCPU, at::kFloat);
    auto check_at = [&](std::int64_t start, std::int64_t b) {
        INFO("anchor " << start << ", block " << b);
        REQUIRE(state.length(0) == start);
        const at::Tensor want = draft_hidden(d, m.head(), ctx, seq[static_cast<std::size_t>(start)], start, at::kFloat, b);
        const at::Tensor got = state.draft({seq[static_cast<std::size_t>(start)]}, {b})[0];
        CHECK(got.sizes() == want.sizes());
        CHECK(at::allclose(got, want, kRtol, kAtol));
        // The fixed shapes a draft step's CUDA graph captures: the cache positions of a window,
        // those past the block unseen (how far each query attends comes from the device input).
        for (const std::int64_t window : {start + b, state.key_capacity()}) {
            INFO("window " << window);
            std::vector<std::int64_t> longs{seq[static_cast<std::size_t>(start)]};
            for (std::int64_t j = 1; j < b; ++j) longs.push_back(cfg.mask_token_id);
            for (std::int64_t j = 0; j < b; ++j) longs.push_back(start + j);
            for (std::int64_t j = 0; j < b; ++j) longs.push_back(start + b - 1);
            CHECK(at::allclose(state.draft_fixed(at::tensor(longs, at::kLong), b, window)[0], want, kRtol, kAtol));
        }
    };
    state.extend(ctx.narrow(1, 0, 5), {5});  // the prompt
    check_at(5, 4);
    state.extend(ctx.narrow(1, 5, 3), {3});  // a step accepting 2 drafts + the target's token
    check_at(8, 4);
    state.extend(ctx.narrow(1, 8, 4), {4});
    state.crop(0, 10);                       // back to 10 rows
    check_at(10, 4);
    state.extend(ctx.narrow(1, 10, 9), {9});
    check_at(19, 3);                         // a short last block
    CHECK(test::error_of([&] { state.crop(0, 20); }).find("crop only shortens") != std::string::npos);
    CHECK(test::error_of([&] { state.extend(ctx.narrow(1, 0, 6), {6}); }).find("do not fit") != std::string::npos);
    CHECK(test::error_of([&] { state.extend(ctx.narrow(1, 0, 2), {3}); }).find("add up to 3") != std::string::npos);
    CHECK(test::error_of([&] { state.draft({1}, {5}); }).find("2..4 allowed") != std::string::npos);

    // Three sequences as rows of one state, of other lengths and block sizes: each row drafts what
    // it drafts alone (the padding of shorter contexts and blocks is masked), through a packed
    // extend, a crop, and dropping a row.
    const auto seq2 = iota_tokens(24, 40, 7);
    const at::Tensor ctx2 = captured_layers(m, seq2, cfg.target_layer_ids);
    DFlashDecodeState rows(d, m.head(), 3, 24, at::kCPU, at::kFloat);
    rows.extend(at::cat({ctx.narrow(1, 0, 6), ctx2.narrow(1, 0, 11), ctx.narrow(1, 0, 3)}, 1), {6, 11, 3});
    auto check_rows = [&](const std::vector<const std::vector<std::int64_t>*>& seqs, const std::vector<const at::Tensor*>& ctxs,
                          const std::vector<std::int64_t>& blocks) {
        std::vector<std::int64_t> lasts;
        for (std::size_t r = 0; r < seqs.size(); ++r) lasts.push_back((*seqs[r])[static_cast<std::size_t>(rows.length(static_cast<std::int64_t>(r)))]);
        const at::Tensor got = rows.draft(lasts, blocks);
        for (std::size_t r = 0; r < seqs.size(); ++r) {
            const std::int64_t start = rows.length(static_cast<std::int64_t>(r)), b = blocks[r];
            INFO("row " << r << " at " << start << ", block " << b);
            const at::Tensor want = draft_hidden(d, m.head(), *ctxs[r], lasts[r], start, at::kFloat, b);
            CHECK(at::allclose(got[static_cast<std::int64_t>(r)].narrow(0, 0, b), want, kRtol, kAtol));
        }
    };
    check_rows({&seq, &seq2, &seq}, {&ctx, &ctx2, &ctx}, {4, 3, 4});
    rows.extend(at::cat({ctx.narrow(1, 6, 2), ctx.narrow(1, 3, 4)}, 1), {2, 0, 4});
    rows.crop(1, 9);
    check_rows({&seq, &seq2, &seq}, {&ctx, &ctx2, &ctx}, {4, 4, 2});
    rows.keep_rows({2, 1});
    check_rows({&seq, &seq2}, {&ctx, &ctx2}, {3, 4});
    CHECK(rows.length(0) == 7);
}

TEST_CASE("sampled spec_decode emits generate's sampled tokens for the same seeds; other seeds differ") {
    CHECK(SequenceRng::uniform_at(77, 0) == SequenceRng(77).uniform());
    {
        SequenceRng r(5);
        for (std::uint64_t i = 0; i < 6; ++i) CHECK(r.uniform() == SequenceRng::uniform_at(5, i));
    }
    auto m = TargetModel::load(preset_shape("tiny"), at::kCPU, at::kFloat, 12);
    DFlashDrafter d(dflash_config_for(m.shape(), 1, 4, -1, {1, 4, 6}), 3, at::kCPU);
    std::vector<GenerateRequest> reqs = spec_prompts({101, 202, 303});
    GenerateOptions go = generate_options(20, {1.0, 0.95});
    go.batch = 3;
    SpecDecodeOptions so = spec_options_like(go);
    const auto plain = generate(m, reqs, go);
    const auto spec = spec_decode(m, d, reqs, so);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
        INFO("prompt " << i);
        CHECK(spec.outputs[i].tokens == plain.outputs[i].tokens);
        std::int64_t sum = 1;
        for (std::int64_t a : spec.outputs[i].acceptance_lengths) sum += a;
        CHECK(sum > 20);
        CHECK(sum - spec.outputs[i].acceptance_lengths.back() <= 20);
    }
    {  // the same draws in a batch: each row samples with its own seed's numbers
        SpecDecodeOptions bo = so;
        bo.batch = 3;
        const auto batched = spec_decode(m, d, reqs, bo);
        for (std::size_t i = 0; i < reqs.size(); ++i) {
            CHECK(batched.outputs[i].tokens == spec.outputs[i].tokens);
            CHECK(batched.outputs[i].acceptance_lengths == spec.outputs[i].acceptance_lengths);
        }
    }
    // Sampled, not greedy: the greedy output and other seeds' outputs differ.
    SpecDecodeOptions greedy = so;
    greedy.sampling = {};
    CHECK(spec_decode(m, d, reqs, greedy).outputs[1].tokens != spec.outputs[1].tokens);
    for (auto& r : reqs) r.seed += 1;
    CHECK(spec_decode(m, d, reqs, so).outputs[1].tokens != spec.outputs[1].tokens);
    so.sampling = {-1.0, 1.0};
    CHECK(test::error_of([&] { spec_decode(m, d, reqs, so); }).find("temperature") != std::string::npos);
}

TEST_CASE("spec_decode accepts whole blocks when the drafter drafts what the target says") {
    // A tiny random target with tied embeddings echoes its last token; a drafter whose layers add
    // nothing (o_proj, down_proj = 0) outputs norm(embed(block token)), whose argmax under the tied
    // head is that token: with the mask token = the echoed one every draft is accepted.
    auto m = echoing_tiny_target();
    const std::vector<GenerateRequest> reqs{{iota_tokens(6, 30), 0}};
    const auto plain = require_echoes(m, reqs, 17);
    const std::int64_t echo = reqs[0].prompt.back();
    DFlashDrafter d(dflash_config_for(m.shape(), 1, 4, echo, {1, 4, 6}), 3, at::kCPU);
    {
        at::NoGradGuard ng;
        for (auto& p : d->named_parameters())
            if (p.key().ends_with("o_proj.weight") || p.key().ends_with("down_proj.weight")) p.value().zero_();
    }
    SpecDecodeOptions so = spec_options_like(generate_options(17));
    const auto spec = spec_decode(m, d, reqs, so);
    CHECK(spec.outputs[0].tokens == plain.outputs[0].tokens);
    // 1 (prefill) + 4 x 4 = 17 tokens exist after four steps; as in z-lab's loop a fifth step runs
    // (its tokens are past the limit, its acceptance length counts).
    CHECK(spec.outputs[0].acceptance_lengths == std::vector<std::int64_t>{4, 4, 4, 4, 4});
    CHECK(spec.stats.tau() == 4.0);
    // 1 + 4 + 4 = 9 <= 11: a third whole block, two of its tokens used.
    so.max_new_tokens = 11;
    const auto cut = spec_decode(m, d, reqs, so);
    CHECK(cut.outputs[0].tokens == std::vector<std::int64_t>(11, echo));
    CHECK(cut.outputs[0].acceptance_lengths == std::vector<std::int64_t>{4, 4, 4});
}

TEST_CASE("hsring-model spec-decode --json: acceptance lengths, tau, lossless, tokens/s; a drafter for another target is one line") {
    TempDir dir;
    const ModelShape shape = preset_shape("tiny");
    const DFlashConfig cfg = dflash_config_for(shape, 1, 4, -1, {1, 4, 6});
    DFlashDrafter d(cfg, 3, at::kCPU);
    const auto drafter = dir.path() / "drafter";
    export_dflash(drafter, d, cfg);
    const auto prompts = dir.path() / "prompts.jsonl";
    std::ofstream(prompts) << R"({"input_ids": [1, 2, 3]})" << "\n"
                           << R"({"input_ids": [5, 6, 7, 8, 9], "loss_mask": [0, 0, 0, 1, 1]})" << "\n"
                           << R"({"input_ids": [40, 41]})" << "\n";
    const auto out = dir.path() / "out.json", log = dir.path() / "log";
    const std::string cmd = "spec-decode " + q(drafter) + " --target preset:tiny --prompts " + q(prompts);
    REQUIRE(run_cli(cmd + " --max-new-tokens 9 --samples 2 --preset-seed 3 --json", out, log) == 0);
    const auto j = nlohmann::json::parse(slurp(out));
    CHECK(j["lossless"] == true);
    CHECK(j["tau"].get<double>() >= 1.0);
    CHECK(j["new_tokens"] == 18);
    CHECK(j["spec_tokens_per_s"].get<double>() > 0);
    CHECK(j["target_tokens_per_s"].get<double>() > 0);
    CHECK(j["speedup"].get<double>() > 0);
    REQUIRE(j["prompts"].size() == 2);
    auto m = TargetModel::load(shape, at::kCPU, at::kFloat, 3);
    GenerateOptions o;
    o.max_new_tokens = 9;
    const auto want = generate(m, {{{1, 2, 3}, 0}, {{5, 6, 7}, 0}}, o);
    std::int64_t steps = 0;
    for (std::size_t i = 0; i < 2; ++i) {
        CHECK(j["prompts"][i]["output_ids"].get<std::vector<std::int64_t>>() == want.outputs[i].tokens);
        steps += static_cast<std::int64_t>(j["prompts"][i]["acceptance_lengths"].size());
    }
    CHECK(j["verify_steps"] == steps);
    // The step costs beside each other (the decode engine's bench reads them), the weights a
    // plain step reads, and the engine's switch; the same tokens op by op (--eager).
    CHECK(j["decode_graphs"] == true);
    CHECK(j["plain_ms_per_token"].get<double>() > 0);
    CHECK(j["verify_ms_per_step"].get<double>() > 0);
    CHECK(j["weight_bytes"].get<std::uint64_t>() == m.decode_bytes());
    CHECK(m.decode_bytes() > static_cast<std::uint64_t>(shape.vocab_size * shape.hidden_size * 4));  // the LM head and more
    REQUIRE(run_cli(cmd + " --max-new-tokens 9 --samples 2 --preset-seed 3 --eager --json", out, log) == 0);
    const auto e = nlohmann::json::parse(slurp(out));
    CHECK(e["decode_graphs"] == false);
    for (std::size_t i = 0; i < 2; ++i) CHECK(e["prompts"][i]["output_ids"] == j["prompts"][i]["output_ids"]);
    // random:L: a fresh drafter for timing (tau 1 on a random target), still lossless.
    REQUIRE(run_cli("spec-decode random:1 --target preset:tiny --prompts " + q(prompts) + " --max-new-tokens 6 --json", out,
                    log) == 0);
    CHECK(nlohmann::json::parse(slurp(out))["lossless"] == true);
    CHECK(run_cli("spec-decode random:0 --target preset:tiny --prompts " + q(prompts), out, log) == 1);
    CHECK(slurp(log).find("random:LAYERS needs at least 1 layer") != std::string::npos);
    REQUIRE(run_cli(cmd + " --max-new-tokens 4", out, log) == 0);
    CHECK(slurp(out).find("lossless: yes") != std::string::npos);

    // A drafter for another target: one line naming its config.json, exit 1.
    ModelShape t = shape;
    t.vocab_size = 600;
    save_hf_model_dir(dir.path() / "vocab600", t, random_target_weights(t, 1, at::kCPU, at::kFloat));
    CHECK(run_cli("spec-decode " + q(drafter) + " --target " + q(dir.path() / "vocab600") + " --prompts " + q(prompts),
                  out, log) == 1);
    std::string msg = slurp(log);
    CHECK(msg.find((drafter / "config.json").string() + ": the drafter's vocab_size 512 does not match") !=
          std::string::npos);
    CHECK(msg.find('\n') == msg.size() - 1);
    CHECK(run_cli("spec-decode " + q(drafter) + " --target preset:qwen3-8b --prompts " + q(prompts), out, log) == 1);
    CHECK(slurp(log).find("hidden_size 64 does not match") != std::string::npos);
    CHECK(run_cli("spec-decode " + q(drafter) + " --prompts " + q(prompts), out, log) == 2);
    CHECK(slurp(log).find("--target MODEL is missing") != std::string::npos);
}

} // TEST_SUITE
