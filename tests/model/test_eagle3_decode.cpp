// EAGLE-3 speculative decoding (suite "eagle3_decode"): the decode chain drafts what the
// training-time test computes (every draft's logits, through the prefill, verify extends and
// several rows), spec_decode with an EAGLE-3 drafter is greedy / sampled generate's (acceptance
// lengths 1..K+1), a drafter that drafts what the target says is accepted whole, and an export
// decodes through the registry and `hsring-model spec-decode`.
#include "spec_decode_fixture.hpp"
#include "model/drafter/dflash/trainable.hpp"
#include "model/drafter/eagle3/decode.hpp"
#include "model/drafter/eagle3/trainable.hpp"
#include "model/drafter/registry/registry.hpp"
#include "model_test_util.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <fstream>

using namespace hsring;
using namespace hsring::model;
using namespace hsring::test;

namespace {

// A fresh EAGLE-3 drafter for `m` (fused layers 1, 3, 4 of preset:tiny's 8) with a draft
// vocabulary of `draft_vocab` tokens (0 = all), its weights moved away from their init by
// N(0, noise^2) so every part of the layer matters.
std::unique_ptr<TrainableDrafter> eagle3_for(TargetModel& m, std::int64_t draft_vocab, double noise, std::uint64_t seed) {
    DrafterSpec spec;
    spec.type = "eagle3";
    spec.target = m.shape();
    spec.layer_ids = eagle3_layer_ids(static_cast<int>(m.shape().num_layers));
    spec.draft_vocab = draft_vocab;
    spec.token_counts.assign(static_cast<std::size_t>(m.shape().vocab_size), 0);
    for (std::int64_t i = 0; i < m.shape().vocab_size; ++i) spec.token_counts[static_cast<std::size_t>(i)] = (i * 37) % 11;
    const TargetHead head = m.head();
    spec.head = &head;
    auto d = make_drafter(spec, seed, at::kCPU);
    at::NoGradGuard ng;
    at::Generator g = cpu_generator(seed);
    for (auto& p : d->module().parameters()) p.add_(at::randn(p.sizes(), g) * noise);
    d->module().eval();
    return d;
}

Eagle3Drafter& module_of(TrainableDrafter& d) { return dynamic_cast<Eagle3Trainable&>(d).drafter(); }

// The training forward's logits [K][Vd] of the last row n - 1 of the sequence `ext` (its first
// n + 1 tokens verified: the layers `captured` [3, >= n, H] at 0..n-1; tokens past n are the
// chain's drafts), at steps 0..K-1: rows 0..n-1 (layers at j, token j + 1), step k embedding token
// j + 1 + k (teacher-forced: the drafts themselves).
std::vector<at::Tensor> training_chain(Eagle3Drafter& d, const TargetHead& head, const at::Tensor& captured,
                                       const std::vector<std::int64_t>& ext, std::int64_t n, std::int64_t k) {
    REQUIRE(static_cast<std::int64_t>(ext.size()) >= n + k);
    Eagle3Rows rows;
    rows.fused = captured.narrow(1, 0, n);
    rows.positions = at::arange(1, n + 1, at::kLong);
    rows.same_seq_causal = at::ones({n, n}, at::kBool).tril();
    for (std::int64_t s = 0; s < k; ++s)
        rows.step_tokens.push_back(tokens_of(slice(ext, static_cast<std::size_t>(1 + s), static_cast<std::size_t>(n + 1 + s))));
    at::NoGradGuard ng;
    const auto outs = d->forward_steps(rows, head.embed, at::kFloat);
    std::vector<at::Tensor> logits;
    for (const auto& o : outs) logits.push_back(d->logits(o, at::kFloat)[n - 1]);
    return logits;
}

// Picks greedy drafts and keeps the logits each draft came from ([rows, vocab] per chain step).
struct Recorder {
    std::vector<at::Tensor> logits;
    PickDrafts pick() {
        return [this](const at::Tensor& l, std::int64_t j0, std::int64_t n) {
            CHECK(j0 == static_cast<std::int64_t>(logits.size()));
            CHECK(n == 1);
            logits.push_back(l.clone());
            const at::Tensor a = l.argmax(-1).contiguous();
            return std::vector<std::int64_t>(a.data_ptr<std::int64_t>(), a.data_ptr<std::int64_t>() + a.numel());
        };
    }
};

std::vector<std::int64_t> tokens_after(const std::vector<std::int64_t>& seq, std::int64_t from, std::int64_t count) {
    return slice(seq, static_cast<std::size_t>(from + 1), static_cast<std::size_t>(from + 1 + count));
}

} // namespace

TEST_SUITE("eagle3_decode") {

TEST_CASE("the decode chain drafts what the training-time test computes, through verify extends and several rows") {
    auto m = TargetModel::load(preset_shape("tiny"), at::kCPU, at::kFloat, 12);
    auto d = eagle3_for(m, 100, 0.05, 4);
    Eagle3Drafter& e = module_of(*d);
    const TargetHead head = m.head();
    const std::vector<int> ids = e->config().aux_layer_ids;
    const at::Tensor draft_ids = e->draft_ids();
    const std::int64_t K = 4;
    // Row `row` of `s` verified up to position n (last token seq[n]): its drafts and their logits
    // equal the training forward's chain over the same tokens.
    auto check_chain = [&](DecodeDrafter& s, const std::vector<const std::vector<std::int64_t>*>& seqs,
                           const std::vector<const at::Tensor*>& ctxs, const std::vector<std::int64_t>& ns,
                           const std::vector<std::int64_t>& ks) {
        Recorder rec;
        std::vector<std::int64_t> lasts;
        for (std::size_t r = 0; r < seqs.size(); ++r) lasts.push_back((*seqs[r])[static_cast<std::size_t>(ns[r])]);
        const auto drafted = s.draft(lasts, ks, rec.pick());
        // A greedy pick may run on the device: the same drafts; one graphed row never calls it
        // (its whole chain is one graph), any other state does.
        std::int64_t host_picks = 0;
        const PickDrafts greedy(
            [&](const at::Tensor& l, std::int64_t, std::int64_t) {
                ++host_picks;
                const at::Tensor a = l.argmax(-1).contiguous();
                return std::vector<std::int64_t>(a.data_ptr<std::int64_t>(), a.data_ptr<std::int64_t>() + a.numel());
            },
            true);
        CHECK(s.draft(lasts, ks, greedy) == drafted);
        const bool chain_graph = dynamic_cast<Eagle3DecodeDrafter&>(s).fixed_shapes() && seqs.size() == 1;
        CHECK((host_picks == 0) == (chain_graph || drafted.empty()));
        std::size_t off = 0;
        for (std::size_t r = 0; r < seqs.size(); ++r) {
            const std::int64_t n = ns[r], kr = ks[r] - 1;
            INFO("row " << r << " verified through position " << n << ", " << kr << " drafts");
            const std::vector<std::int64_t> mine = slice(drafted, off, off + static_cast<std::size_t>(kr));
            off += static_cast<std::size_t>(kr);
            if (kr == 0) continue;
            const std::vector<std::int64_t> ext = cat(slice(*seqs[r], 0, static_cast<std::size_t>(n + 1)), mine);
            const auto want = training_chain(e, head, *ctxs[r], ext, n, kr);
            for (std::int64_t k = 0; k < kr; ++k) {
                INFO("draft " << k + 1);
                const at::Tensor got = rec.logits[static_cast<std::size_t>(k)][static_cast<std::int64_t>(r)];
                CHECK(at::allclose(got.index_select(0, draft_ids), want[static_cast<std::size_t>(k)], kRtol, kAtol));
                // Ids outside the draft vocabulary are never drafted.
                CHECK(got.isinf().sum().item<std::int64_t>() == m.shape().vocab_size - draft_ids.size(0));
                CHECK(mine[static_cast<std::size_t>(k)] ==
                      draft_ids[want[static_cast<std::size_t>(k)].argmax().item<std::int64_t>()].item<std::int64_t>());
            }
        }
        CHECK(off == drafted.size());
    };

    at::NoGradGuard ng;
    const auto seq = iota_tokens(24, 11, 5);
    const at::Tensor ctx = captured_layers(m, seq, ids);  // [3, 24, H]
    // One sequence op by op, and in the fixed shapes of its CUDA graphs (run directly on the CPU:
    // a window of cached positions, those past the length masked).
    for (const bool graphs : {false, true}) {
        INFO("graphs " << graphs);
        auto state = d->decoder(m.shape(), head, 1, 32, at::kCPU, at::kFloat, K, graphs);
        REQUIRE(state->max_block() == K + 1);
        CHECK(state->target_layer_ids() == ids);
        auto& chain = dynamic_cast<Eagle3DecodeDrafter&>(*state);
        state->extend(ctx.narrow(1, 0, 5), {5}, tokens_after(seq, 0, 5));  // the prompt 0..4 with the first new token 5
        CHECK(chain.length(0) == 5);
        check_chain(*state, {&seq}, {&ctx}, {5}, {K + 1});
        state->extend(ctx.narrow(1, 5, 3), {3}, tokens_after(seq, 5, 3));  // a step accepting 2 drafts + the target's token
        check_chain(*state, {&seq}, {&ctx}, {8}, {K + 1});
        state->extend(ctx.narrow(1, 8, 1), {1}, tokens_after(seq, 8, 1));  // a step accepting nothing
        check_chain(*state, {&seq}, {&ctx}, {9}, {3});                     // a short chain: its first drafts
        CHECK(state->draft({seq[9]}, {1}, Recorder{}.pick()).empty());
    }
    {  // room for 4 positions + one verify step of 2
        auto small = d->decoder(m.shape(), head, 1, 4, at::kCPU, at::kFloat, 1, false);
        CHECK(test::error_of([&] { small->extend(ctx.narrow(1, 0, 7), {7}, tokens_after(seq, 0, 7)); })
                  .find("room for 6") != std::string::npos);
    }

    // Three sequences as rows of one state, of other lengths and chains: each row drafts what it
    // drafts alone (shorter caches are masked), through a packed extend and dropping a row.
    const auto seq2 = iota_tokens(24, 40, 7);
    const at::Tensor ctx2 = captured_layers(m, seq2, ids);
    auto rows = d->decoder(m.shape(), head, 3, 32, at::kCPU, at::kFloat, K, false);
    rows->extend(at::cat({ctx.narrow(1, 0, 6), ctx2.narrow(1, 0, 11), ctx.narrow(1, 0, 3)}, 1), {6, 11, 3},
                 cat(cat(tokens_after(seq, 0, 6), tokens_after(seq2, 0, 11)), tokens_after(seq, 0, 3)));
    check_chain(*rows, {&seq, &seq2, &seq}, {&ctx, &ctx2, &ctx}, {6, 11, 3}, {K + 1, 3, K + 1});
    rows->extend(at::cat({ctx.narrow(1, 6, 2), ctx.narrow(1, 3, 5)}, 1), {2, 0, 5},
                 cat(tokens_after(seq, 6, 2), tokens_after(seq, 3, 5)));
    check_chain(*rows, {&seq, &seq2, &seq}, {&ctx, &ctx2, &ctx}, {8, 11, 8}, {2, K + 1, K + 1});
    rows->keep_rows({2, 1});
    check_chain(*rows, {&seq, &seq2}, {&ctx, &ctx2}, {8, 11}, {K + 1, 4});
    CHECK(dynamic_cast<Eagle3DecodeDrafter&>(*rows).length(0) == 8);

    CHECK(test::error_of([&] { d->decoder(m.shape(), head, 1, 32, at::kCPU, at::kFloat, -1, false); }).find("draft_tokens must be >= 1") !=
          std::string::npos);
    ModelShape wide = m.shape();
    wide.hidden_size = 96;
    CHECK(test::error_of([&] { d->decoder(wide, head, 1, 32, at::kCPU, at::kFloat, 0, false); })
              .find("the drafter's hidden_size 64 does not match") != std::string::npos);
    CHECK(d->misfit(m.shape()).empty());
    ModelShape shallow = m.shape();
    shallow.num_layers = 4;
    CHECK(d->misfit(shallow).find("8-layer target") != std::string::npos);
}

TEST_CASE("spec_decode with an EAGLE-3 drafter is greedy generate's, each step accepting 1..K+1 tokens") {
    auto m = TargetModel::load(preset_shape("tiny"), at::kCPU, at::kFloat, 12);
    auto d = eagle3_for(m, 0, 0.05, 5);
    const std::vector<GenerateRequest> reqs = spec_prompts();
    GenerateOptions go = generate_options(19);
    const auto plain = generate(m, reqs, go);
    for (std::int64_t k : {0, 1, 3}) {
        INFO(k << " draft tokens");
        const std::int64_t block = k == 0 ? Eagle3Trainable::kDefaultDraftTokens + 1 : k + 1;
        const SpecDecodeOptions so = spec_options_like(go, k);
        const auto spec = spec_decode(m, *d, reqs, so);
        CHECK(spec.block == block);
        std::int64_t steps = 0;
        for (std::size_t i = 0; i < reqs.size(); ++i) {
            INFO("prompt " << i);
            const auto& out = spec.outputs[i];
            CHECK(out.tokens == plain.outputs[i].tokens);
            std::int64_t sum = 1;
            for (std::int64_t a : out.acceptance_lengths) {
                CHECK(a >= 1);
                CHECK(a <= block);
                sum += a;
            }
            CHECK(sum > 19);
            CHECK(sum - out.acceptance_lengths.back() <= 19);
            steps += static_cast<std::int64_t>(out.acceptance_lengths.size());
        }
        CHECK(spec.stats.verify_steps == steps);
        CHECK(spec.stats.new_tokens == 57);
        for (std::int64_t batch : {2, 3}) {  // rows of one batch: each prompt decodes as alone
            INFO("batch " << batch);
            SpecDecodeOptions bo = so;
            bo.batch = batch;
            const auto b = spec_decode(m, *d, reqs, bo);
            for (std::size_t i = 0; i < reqs.size(); ++i) {
                CHECK(b.outputs[i].tokens == spec.outputs[i].tokens);
                CHECK(b.outputs[i].acceptance_lengths == spec.outputs[i].acceptance_lengths);
            }
        }
    }
    // A stop token and the model's last position end it as they end generate, batched too.
    auto short_m = short_tiny_target();
    go.stop_tokens = {plain.outputs[0].tokens[5]};
    const auto plain2 = generate(short_m, reqs, go);
    for (std::int64_t batch : {1, 3}) {
        const SpecDecodeOptions so = spec_options_like(go, 0, batch);
        const auto spec2 = spec_decode(short_m, *d, reqs, so);
        for (std::size_t i = 0; i < reqs.size(); ++i) {
            INFO("prompt " << i << ", batch " << batch);
            CHECK(spec2.outputs[i].tokens == plain2.outputs[i].tokens);
            CHECK(spec2.outputs[i].finish == plain2.outputs[i].finish);
        }
    }
    // Sampled: generate's tokens for the same seeds.
    const std::vector<GenerateRequest> sreqs = spec_prompts({100, 101, 102});
    const GenerateOptions sg = generate_options(15, {1.0, 0.95});
    const SpecDecodeOptions ss = spec_options_like(sg, 3);
    const auto sampled_plain = generate(m, sreqs, sg);
    const auto sampled = spec_decode(m, *d, sreqs, ss);
    for (std::size_t i = 0; i < sreqs.size(); ++i) CHECK(sampled.outputs[i].tokens == sampled_plain.outputs[i].tokens);

    SpecDecodeOptions bad;
    bad.draft_tokens = -2;
    CHECK(test::error_of([&] { spec_decode(m, *d, reqs, bad); }).find("draft_tokens must be >= 0") != std::string::npos);
    // A DFlash drafter drafts its whole block: other draft_tokens are refused.
    DFlashTrainable dflash(DFlashDrafter(dflash_config_for(m.shape(), 1, 4, -1, {1, 4, 6}), 3, at::kCPU),
                           dflash_config_for(m.shape(), 1, 4, -1, {1, 4, 6}));
    bad.draft_tokens = 5;
    CHECK(test::error_of([&] { spec_decode(m, dflash, reqs, bad); }).find("drafts its whole block") != std::string::npos);
    bad.draft_tokens = 3;
    CHECK(spec_decode(m, dflash, reqs, bad).block == 4);
}

TEST_CASE("a chain that drafts what the target says is accepted whole: acceptance length K+1 every step") {
    // A tiny random target with tied embeddings echoes its last token. A drafter whose fc passes the
    // low fused layer through (fc = [I, 0, 0]) and whose layer adds nothing (o_proj, down_proj = 0)
    // outputs the target's layer-1 state of the last verified token, whose argmax under the tied
    // head is that token: every draft is the echoed token.
    auto m = echoing_tiny_target();
    const std::vector<GenerateRequest> reqs{{iota_tokens(6, 30), 0}, {iota_tokens(9, 77, 11), 0}};
    const auto plain = require_echoes(m, reqs, 20);
    auto d = eagle3_for(m, 0, 0.0, 6);
    {
        at::NoGradGuard ng;
        Eagle3Drafter& e = module_of(*d);
        const std::int64_t h = m.shape().hidden_size;
        e->fc->weight.zero_();
        e->fc->weight.narrow(1, 0, h).copy_(at::eye(h));
        e->midlayer->self_attn->o_proj->weight.zero_();
        e->midlayer->mlp->down_proj->weight.zero_();
    }
    for (std::int64_t batch : {1, 2}) {
        INFO("batch " << batch);
        const auto spec = spec_decode(m, *d, reqs, spec_options_like(generate_options(20), 3, batch));
        for (std::size_t i = 0; i < reqs.size(); ++i) {
            CHECK(spec.outputs[i].tokens == plain.outputs[i].tokens);
            // 1 (prefill) + 4 x 4 = 17 <= 20: a fifth step runs, its tokens past the limit dropped.
            CHECK(spec.outputs[i].acceptance_lengths == std::vector<std::int64_t>(5, 4));
        }
        CHECK(spec.stats.tau() == 4.0);
    }
}

TEST_CASE("an exported EAGLE-3 drafter decodes through the registry and hsring-model spec-decode") {
    TempDir dir;
    auto m = TargetModel::load(preset_shape("tiny"), at::kCPU, at::kFloat, 3);
    auto d = eagle3_for(m, 200, 0.05, 7);
    const auto drafter = dir.path() / "drafter";
    d->export_to(drafter, at::kFloat);
    REQUIRE(drafter_type_of(drafter) == "eagle3");
    auto back = load_drafter(drafter, at::kCPU);
    const std::vector<GenerateRequest> reqs{{{1, 2, 3}, 0}, {{5, 6, 7}, 0}, {{40, 41}, 0}};
    const SpecDecodeOptions so = spec_options_like(generate_options(9), 3);
    const auto mine = spec_decode(m, *d, reqs, so), loaded = spec_decode(m, *back, reqs, so);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
        CHECK(loaded.outputs[i].tokens == mine.outputs[i].tokens);
        CHECK(loaded.outputs[i].acceptance_lengths == mine.outputs[i].acceptance_lengths);
    }

    const auto prompts = dir.path() / "prompts.jsonl";
    std::ofstream(prompts) << R"({"input_ids": [1, 2, 3]})" << "\n"
                           << R"({"input_ids": [5, 6, 7, 8, 9], "loss_mask": [0, 0, 0, 1, 1]})" << "\n"
                           << R"({"input_ids": [40, 41]})" << "\n";
    const auto out = dir.path() / "out.json", log = dir.path() / "log";
    const std::string cmd = "spec-decode " + q(drafter) + " --target preset:tiny --prompts " + q(prompts) +
                            " --max-new-tokens 9 --preset-seed 3";
    REQUIRE_MESSAGE(run_cli(cmd + " --draft-tokens 3 --json", out, log) == 0, slurp(log));
    const auto j = nlohmann::json::parse(slurp(out));
    CHECK(j["lossless"] == true);
    CHECK(j["drafter_type"] == "eagle3");
    CHECK(j["block_size"] == 4);
    CHECK(j["draft_tokens"] == 3);
    CHECK(j["new_tokens"] == 27);
    REQUIRE(j["prompts"].size() == 3);
    std::int64_t steps = 0, accepted = 0;
    for (std::size_t i = 0; i < 3; ++i) {
        CHECK(j["prompts"][i]["output_ids"].get<std::vector<std::int64_t>>() == mine.outputs[i].tokens);
        const auto lengths = j["prompts"][i]["acceptance_lengths"].get<std::vector<std::int64_t>>();
        CHECK(lengths == mine.outputs[i].acceptance_lengths);
        for (std::int64_t a : lengths) accepted += a;
        steps += static_cast<std::int64_t>(lengths.size());
    }
    CHECK(j["verify_steps"] == steps);
    CHECK(j["tau"].get<double>() == doctest::Approx(double(accepted) / double(steps)));
    // The default chain (5 drafts), and the text report.
    REQUIRE(run_cli(cmd + " --json", out, log) == 0);
    CHECK(nlohmann::json::parse(slurp(out))["block_size"] == 6);
    REQUIRE(run_cli(cmd, out, log) == 0);
    CHECK(slurp(out).find("EAGLE-3 drafter") != std::string::npos);
    CHECK(slurp(out).find("5 drafts per step") != std::string::npos);
    CHECK(slurp(out).find("lossless: yes") != std::string::npos);

    // Bad --draft-tokens: a usage error; for a DFlash drafter, one line saying why.
    CHECK(run_cli(cmd + " --draft-tokens 0", out, log) == 2);
    CHECK(slurp(log).find("--draft-tokens must be at least 1") != std::string::npos);
    CHECK(run_cli("spec-decode random:1 --target preset:tiny --prompts " + q(prompts) + " --draft-tokens 3", out, log) == 1);
    CHECK(slurp(log).find("drafts its whole block") != std::string::npos);
    // A drafter for another target: one line naming its config.json.
    ModelShape t = preset_shape("tiny");
    t.vocab_size = 600;
    save_hf_model_dir(dir.path() / "vocab600", t, random_target_weights(t, 1, at::kCPU, at::kFloat));
    CHECK(run_cli("spec-decode " + q(drafter) + " --target " + q(dir.path() / "vocab600") + " --prompts " + q(prompts),
                  out, log) == 1);
    const std::string msg = slurp(log);
    CHECK(msg.find((drafter / "config.json").string() + ": the drafter's vocab_size 512 does not match") !=
          std::string::npos);
    CHECK(msg.find('\n') == msg.size() - 1);
}

} // TEST_SUITE
