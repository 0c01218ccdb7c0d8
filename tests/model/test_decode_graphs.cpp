// The decode engine's fixed-shape steps (CUDA graphs on a GPU, direct steps here) equal
// forward_cached, and generate / spec_decode through them emit what they emit op by op (suite
// "generate").
#include "decode_fixture.hpp"
#include "model_test_util.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>

using namespace hsring;
using namespace hsring::model;
using namespace hsring::test;

TEST_SUITE("generate") {

TEST_CASE("step graphs: bucketed key windows; on the CPU a step runs its body directly on its inputs, every time") {
    CHECK(StepGraphs::window(1, 1000) == 256);
    CHECK(StepGraphs::window(256, 1000) == 256);
    CHECK(StepGraphs::window(257, 1000) == 512);
    CHECK(StepGraphs::window(700, 600) == 600);  // never past the capacity
    CHECK(StepGraphs::window(0, 10) == 1);
    CHECK(StepGraphs::window(9, 24, 8) == 16);
    const at::Tensor t = at::ones({3});
    CHECK(StepGraphs::address(t) == static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(t.data_ptr())));

    StepGraphs graphs(at::kCPU, /*capture=*/true, "test steps");
    CHECK_FALSE(graphs.capturing());  // no CUDA device: nothing is captured
    int calls = 0;
    const StepGraphs::Body body = [&](const at::Tensor& longs, const std::vector<at::Tensor>& in) {
        ++calls;
        CHECK((longs.scalar_type() == at::kLong));
        return std::vector<at::Tensor>{longs.to(at::kFloat).sum() + in.at(0).sum()};
    };
    CHECK(graphs.run({1}, {2, 3}, {t}, body)[0].item<float>() == 8.f);
    CHECK(graphs.run({1}, {4, 5}, {t * 2}, body)[0].item<float>() == 15.f);  // the same key, new inputs
    CHECK(calls == 2);
    CHECK(graphs.size() == 0);
    graphs.bind(t.data_ptr());
    graphs.clear();
    CHECK(graphs.size() == 0);
}

TEST_CASE("decode engine steps (fixed shapes, key windows in buckets) equal forward_cached: logits, captured layers, lengths") {
    auto m = TargetModel::load(preset_shape("tiny"), at::kCPU, at::kFloat, 12);
    REQUIRE(m.graphable());
    const std::vector<int> ids{1, 4};
    // Two rows of 5 and 11 prompt tokens, each cache prefilled alike; then decode (n = 1) and
    // verify (n = 4) steps, one cache through forward_cached, the other through the engine with
    // 8-position buckets (windows 8, 16, 24 = capacity).
    const std::int64_t cap = 24;
    KVCache a(m.shape(), 2, cap, at::kCPU, at::kFloat), b(m.shape(), 2, cap, at::kCPU, at::kFloat);
    const auto p0 = iota_tokens(5, 3), p1 = iota_tokens(11, 100, 7);
    std::vector<std::int64_t> flat = p0;
    flat.insert(flat.end(), p1.begin(), p1.end());
    m.forward_cached(tokens_of(flat), {5, 11}, a);
    m.forward_cached(tokens_of(flat), {5, 11}, b);
    DecodeGraphs engine(m, /*graphs=*/true, /*bucket=*/8);
    CHECK(engine.fixed_shapes());
    CHECK_FALSE(engine.captured());  // the CPU runs the steps directly
    std::int64_t next = 40;
    for (std::int64_t n : {1, 4, 1, 4, 1}) {
        INFO("n " << n << " at lengths " << a.length(0) << ", " << a.length(1));
        std::vector<std::int64_t> tokens;
        for (std::int64_t i = 0; i < 2 * n; ++i) tokens.push_back(next++ % m.shape().vocab_size);
        std::vector<at::Tensor> want_layers(ids.size()), got_layers(ids.size());
        const at::Tensor want = m.forward_cached(tokens_of(tokens), {n, n}, a, true, ids,
                                                 [&](std::size_t i, const at::Tensor& h) { want_layers[i] = h.clone(); });
        const at::Tensor got =
            engine.step(tokens, n, b, ids, [&](std::size_t i, const at::Tensor& h) { got_layers[i] = h.clone(); });
        CHECK(got.sizes() == want.sizes());
        CHECK(at::allclose(got, want, kRtol, kAtol));
        for (std::size_t i = 0; i < ids.size(); ++i) CHECK(at::allclose(got_layers[i], want_layers[i], kRtol, kAtol));
        CHECK(b.lengths() == a.lengths());
    }
    // A crop (a rejected draft) then a step: the stale keys after the length are masked.
    a.crop(0, a.length(0) - 2);
    b.crop(0, b.length(0) - 2);
    a.crop(1, a.length(1) - 3);
    b.crop(1, b.length(1) - 3);
    const std::vector<std::int64_t> tokens{5, 6, 7, 8};
    CHECK(at::allclose(engine.step(tokens, 2, b), m.forward_cached(tokens_of(tokens), {2, 2}, a, true), kRtol, kAtol));
    CHECK(test::error_of([&] { engine.step({1, 2, 3}, 2, b); }).find("3 tokens for 2 rows x 2") != std::string::npos);
    CHECK(test::error_of([&] { engine.step({1, 99999}, 1, b); }).find("outside the vocabulary") != std::string::npos);
    CHECK(test::error_of([&] { engine.step(std::vector<std::int64_t>(2 * 20, 1), 20, b); }).find("do not fit its capacity") !=
          std::string::npos);

    // A model the engine cannot run in fixed shapes (MoE routing) takes forward_cached.
    auto moe = TargetModel::load(preset_shape("tiny-moe"), at::kCPU, at::kFloat, 12);
    CHECK_FALSE(moe.graphable());
    DecodeGraphs moe_engine(moe);
    CHECK_FALSE(moe_engine.fixed_shapes());
    KVCache c(moe.shape(), 1, cap, at::kCPU, at::kFloat), d(moe.shape(), 1, cap, at::kCPU, at::kFloat);
    moe.forward_cached(tokens_of(p0), {5}, c);
    moe.forward_cached(tokens_of(p0), {5}, d);
    CHECK(at::equal(moe_engine.step({9, 10}, 2, d), moe.forward_cached(tokens_of({9, 10}), {2}, c, true)));
}

TEST_CASE("generate and spec_decode through the decode engine (batch 1) emit what they emit op by op") {
    auto m = TargetModel::load(preset_shape("tiny"), at::kCPU, at::kFloat, 12);
    DFlashDrafter d = perturbed_drafter(dflash_config_for(m.shape(), 1, 4, -1, {1, 4, 6}), 5);
    const std::vector<GenerateRequest> reqs{{iota_tokens(5, 1), 0}, {iota_tokens(17, 200, 3), 0}, {{7}, 0}};
    for (std::int64_t batch : {1, 3}) {
        INFO("batch " << batch);
        GenerateOptions go;
        go.max_new_tokens = 21;
        go.batch = batch;
        GenerateOptions eager = go;
        eager.decode_graphs = false;
        const auto g1 = generate(m, reqs, go), g0 = generate(m, reqs, eager);
        SpecDecodeOptions so;
        so.max_new_tokens = 21;
        so.batch = batch;
        SpecDecodeOptions seager = so;
        seager.decode_graphs = false;
        const auto s1 = spec_decode(m, d, reqs, so), s0 = spec_decode(m, d, reqs, seager);
        for (std::size_t i = 0; i < reqs.size(); ++i) {
            INFO("prompt " << i);
            CHECK(g1.outputs[i].tokens == g0.outputs[i].tokens);
            CHECK(s1.outputs[i].tokens == s0.outputs[i].tokens);
            CHECK(s1.outputs[i].acceptance_lengths == s0.outputs[i].acceptance_lengths);
            CHECK(s1.outputs[i].tokens == g1.outputs[i].tokens);  // lossless
        }
    }
}

} // TEST_SUITE
