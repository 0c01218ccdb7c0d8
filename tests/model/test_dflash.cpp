// The DFlash drafter: anchor sampling and block layout, the block attention mask (probed by
// perturbing what a block must not see), frozen target pieces, chunked == full cross-entropy,
// deterministic init, export -> import bit for bit, and a training step that learns.
#include "dflash_fixture.hpp"
#include "model/ops/attention.hpp"
#include "model/ops/chunked_ce.hpp"
#include "model/drafter/dflash/eval.hpp"
#include "model/drafter/dflash/flops.hpp"
#include "model/drafter/dflash/export.hpp"
#include "model/io/safetensors.hpp"
#include "model_test_util.hpp"

#include "hsring/acceptance.hpp"

#include <nlohmann/json.hpp>
#include <torch/optim/adamw.h>

#include <fstream>

using namespace hsring;
using namespace hsring::model;
using hsring::test::DFlashFixture;
using hsring::test::error_of;
using hsring::test::TempDir;

namespace {

std::vector<std::int64_t> host(const at::Tensor& t) {
    at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
    return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

// Drafter output rows of block j.
at::Tensor block_rows(const at::Tensor& out, std::int64_t j, std::int64_t b) { return out.narrow(0, j * b, b); }

} // namespace

TEST_SUITE("dflash") {

// The anchor rule, restated from the public DFlash trainers: p valid iff loss_mask[p] = 1,
// loss_mask[p+1] = 1 and p + B <= end of p's sequence.
std::vector<std::int64_t> valid_by_rule(const std::vector<std::int64_t>& mask, std::int64_t begin, std::int64_t end,
                                        std::int64_t b) {
    std::vector<std::int64_t> v;
    for (auto p = begin; p < end; ++p)
        if (mask[static_cast<std::size_t>(p)] == 1 && p + 1 < end && mask[static_cast<std::size_t>(p + 1)] == 1 &&
            p + b <= end)
            v.push_back(p);
    return v;
}

TEST_CASE("anchors: two trained tokens and a whole block, sorted, min(num_anchors, valid) per sequence, deterministic") {
    DFlashFixture f;
    const auto& cu = f.batch.cu_seqlens;
    const auto mask = host(f.batch.loss_mask.gt(0.5));
    at::Generator g1 = cpu_generator(1), g2 = cpu_generator(1);
    for (std::int64_t b : {2, 4, 8}) {
        for (std::int64_t n : {1, 3, 5, 1000}) {
            INFO("block " << b << " num_anchors " << n);
            auto a = sample_dflash_blocks(f.batch.tokens, f.batch.loss_mask, cu, b, 511, n, 7.0, g1);
            auto same = sample_dflash_blocks(f.batch.tokens, f.batch.loss_mask, cu, b, 511, n, 7.0, g2);
            CHECK(bool(a.anchors == same.anchors));
            std::vector<std::int64_t> per_seq(cu.size() - 1, 0);
            for (std::size_t j = 0; j < a.anchors.size(); ++j) {
                const auto p = a.anchors[j];
                const std::size_t s = static_cast<std::size_t>(std::upper_bound(cu.begin(), cu.end(), p) - cu.begin() - 1);
                ++per_seq[s];
                const auto valid = valid_by_rule(mask, cu[s], cu[s + 1], b);
                CHECK(std::find(valid.begin(), valid.end(), p) != valid.end());
                CHECK(a.seq_begin[j] == cu[s]);
                if (j > 0 && a.seq_begin[j - 1] == a.seq_begin[j]) CHECK(a.anchors[j - 1] < p);
            }
            for (std::size_t s = 0; s + 1 < cu.size(); ++s)
                CHECK(per_seq[s] ==
                      std::min(n, static_cast<std::int64_t>(valid_by_rule(mask, cu[s], cu[s + 1], b).size())));
            // Slot 1 of every block is a trained token: no block carries zero weight.
            const auto w = a.weights.reshape({a.num_blocks(), b});
            if (a.num_blocks() > 0) CHECK(w.select(1, 1).gt(0).all().item<bool>());
        }
    }
    auto a = sample_dflash_blocks(f.batch.tokens, f.batch.loss_mask, cu, 4, 511, 5, 7.0, g1);
    auto c = sample_dflash_blocks(f.batch.tokens, f.batch.loss_mask, cu, 4, 511, 5, 7.0, g1);  // next draw
    CHECK(bool(a.anchors != c.anchors));
}

TEST_CASE("the scored rows found on the host are the rows of positive weight, for any mask and gamma") {
    // Masks with fractional and zero entries; gammas with no decay (0), the usual, and one whose
    // decay underflows to 0 beyond slot 5. The device mask here is on the CPU like the host's, so
    // both are given: the list must equal (weights > 0).nonzero() exactly.
    at::Generator g = cpu_generator(11);
    const at::Tensor tokens = at::arange(60, at::kLong);
    at::Tensor mask = at::rand({60}, g);
    mask = at::where(mask < 0.3, at::zeros_like(mask), mask);
    const std::vector<std::int64_t> cu{0, 17, 40, 60};
    for (double gamma : {0.0, 7.0, 0.05}) {
        INFO("gamma " << gamma);
        at::Generator a = cpu_generator(5);
        const DFlashBlocks b = sample_dflash_blocks(tokens, mask, cu, 8, 511, 4, gamma, a, mask.clone());
        REQUIRE(b.num_blocks() > 0);
        REQUIRE(b.scored.defined());
        CHECK(at::equal(b.scored, (b.weights > 0).nonzero().squeeze(1)));
        const DFlashBlocks at_anchors = dflash_blocks_at(tokens, mask, cu, 8, 511, b.anchors, gamma);
        CHECK(at::equal(at_anchors.scored, b.scored));  // a CPU mask is its own host copy
    }
    // A host mask of the wrong length is refused with the counts.
    at::Generator a = cpu_generator(5);
    CHECK(error_of([&] { sample_dflash_blocks(tokens, mask, cu, 8, 511, 4, 7.0, a, mask.narrow(0, 0, 59)); })
              .find("59 entries for 60 tokens") != std::string::npos);
}

TEST_CASE("anchors: none in a sequence shorter than a block or without two consecutive trained tokens") {
    // Sequences [0,3) all trained but shorter than B = 4; [3,13) trained every other token;
    // [13,20) trained at 13..14 and 18..19 only: 18 + 4 > 20, and 13 + 4 <= 20 is the one valid.
    std::vector<float> m{1, 1, 1, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 1, 0, 0, 0, 1, 1};
    at::Tensor mask = at::tensor(m);
    at::Tensor tokens = at::arange(20, at::kLong);
    const std::vector<std::int64_t> cu{0, 3, 13, 20};
    at::Generator g = cpu_generator(3);
    auto blocks = sample_dflash_blocks(tokens, mask, cu, 4, 511, 100, 7.0, g);
    CHECK(bool(blocks.anchors == std::vector<std::int64_t>{13}));
    auto none = sample_dflash_blocks(tokens.narrow(0, 0, 13), mask.narrow(0, 0, 13), {0, 3, 13}, 4, 511, 100, 7.0, g);
    CHECK(none.num_blocks() == 0);
    // Evaluation anchors follow the same rule, and depend on (seed, sample id) only.
    auto ev = eval_dflash_blocks(tokens, mask, cu, 4, 511, 100, 7.0, 9, {0, 1, 2});
    CHECK(bool(ev.anchors == std::vector<std::int64_t>{13}));
}

TEST_CASE("evaluation anchors: the same blocks for a sample whatever batch it is packed into") {
    DFlashFixture f;
    const auto& cu = f.batch.cu_seqlens;  // sequences [0,23) [23,32) [32,49)
    auto all = eval_dflash_blocks(f.batch.tokens, f.batch.loss_mask, cu, 4, 511, 3, 7.0, 5, {10, 11, 12});
    CHECK(all.num_blocks() > 0);
    // The last sequence alone, with its sample id: its anchors again (shifted to the new batch).
    auto alone = eval_dflash_blocks(f.batch.tokens.narrow(0, 32, 17), f.batch.loss_mask.narrow(0, 32, 17), {0, 17}, 4,
                                    511, 3, 7.0, 5, {12});
    std::vector<std::int64_t> want;
    for (auto a : all.anchors)
        if (a >= 32) want.push_back(a - 32);
    CHECK(!want.empty());
    CHECK(bool(alone.anchors == want));
    // Another sample id or seed draws other anchors (3 of the 23-token sequence's valid ones).
    auto other = eval_dflash_blocks(f.batch.tokens, f.batch.loss_mask, cu, 4, 511, 3, 7.0, 6, {10, 11, 12});
    auto other_id = eval_dflash_blocks(f.batch.tokens, f.batch.loss_mask, cu, 4, 511, 3, 7.0, 5, {13, 11, 12});
    CHECK(bool(other.anchors != all.anchors));
    CHECK(bool(other_id.anchors != all.anchors));
    CHECK(error_of([&] { eval_dflash_blocks(f.batch.tokens, f.batch.loss_mask, cu, 4, 511, 3, 7.0, 5, {1}); })
              .find("1 sample ids for 3 sequences") != std::string::npos);
}

TEST_CASE("block slots: anchor token then mask tokens, labels at anchor+k, decayed weights, zero past the end") {
    DFlashFixture f;
    const auto& cu = f.batch.cu_seqlens;  // sequences [0,23) [23,32) [32,49)
    const auto tokens = host(f.batch.tokens);
    const auto lm = f.batch.loss_mask.to(at::kCPU);
    const std::vector<std::int64_t> anchors{0, 5, 30, 48 - 2};
    auto blk = dflash_blocks_at(f.batch.tokens, f.batch.loss_mask, cu, 4, 511, anchors, 7.0);
    const auto bt = host(blk.block_tokens), labels = host(blk.labels), pos = host(blk.block_positions);
    const auto w = blk.weights.to(at::kCPU);
    const auto counted = host(blk.counted.to(at::kLong));
    for (std::size_t j = 0; j < anchors.size(); ++j) {
        const auto a = anchors[j];
        const auto begin = blk.seq_begin[j];
        const auto end = *std::upper_bound(cu.begin(), cu.end(), a);
        for (std::int64_t k = 0; k < 4; ++k) {
            const std::size_t r = j * 4 + static_cast<std::size_t>(k);
            INFO("block " << j << " slot " << k);
            CHECK(bt[r] == (k == 0 ? tokens[static_cast<std::size_t>(a)] : 511));
            CHECK(pos[r] == a - begin + k);
            const bool inside = a + k < end;
            CHECK(labels[r] == (inside ? tokens[static_cast<std::size_t>(a + k)] : 0));
            const double want = (k == 0 || !inside) ? 0.0 : lm[a + k].item<double>() * std::exp(-(k - 1) / 7.0);
            CHECK(w[static_cast<std::int64_t>(r)].item<double>() == doctest::Approx(want));
            CHECK(counted[r] == (k > 0 && inside && lm[a + k].item<double>() > 0.5));
        }
    }
    CHECK(error_of([&] { dflash_blocks_at(f.batch.tokens, f.batch.loss_mask, cu, 4, 511, {5, 3}, 7.0); })
              .find("sorted") != std::string::npos);
}

TEST_CASE("a block sees its sequence's context strictly before its anchor, its own block, nothing else") {
    DFlashFixture f;
    auto drafter = f.drafter();
    const std::int64_t b = 4;
    const auto& cu = f.batch.cu_seqlens;
    // Blocks in all three sequences; block 2 (anchor 12) is the probe.
    const std::vector<std::int64_t> anchors{3, 7, 12, 18, 25, 40};
    auto blocks = dflash_blocks_at(f.batch.tokens, f.batch.loss_mask, cu, b, 511, anchors, 7.0);
    DFlashLossOptions opt;
    opt.attention.group_blocks = 3;  // groups [3,7,12] [18] [25] [40]: the probe shares a group
    at::NoGradGuard no_grad;
    const at::Tensor base = dflash_hidden(drafter, f.head, f.batch, blocks, opt);
    const std::int64_t probe = 2, a = anchors[probe];

    auto run_with_hidden = [&](const at::Tensor& hidden) {
        DFlashBatch changed = f.batch;
        changed.hidden = hidden;
        return dflash_hidden(drafter, f.head, changed, blocks, opt);
    };
    SUBCASE("context at and after the anchor (same sequence) is invisible") {
        at::Tensor h = f.batch.hidden.clone();
        h.narrow(1, a, cu[1] - a).normal_().mul_(100);
        at::Tensor out = run_with_hidden(h);
        CHECK(at::allclose(block_rows(out, probe, b), block_rows(base, probe, b), 0, 1e-6));
        // ... while the later block of the same sequence (anchor 18) does see part of it.
        CHECK_FALSE(at::allclose(block_rows(out, 3, b), block_rows(base, 3, b), 1e-3, 1e-4));
    }
    SUBCASE("other sequences' context is invisible") {
        at::Tensor h = f.batch.hidden.clone();
        h.narrow(1, cu[1], cu[3] - cu[1]).normal_().mul_(100);
        at::Tensor out = run_with_hidden(h);
        for (std::int64_t j = 0; j < 4; ++j) CHECK(at::allclose(block_rows(out, j, b), block_rows(base, j, b), 0, 1e-6));
    }
    SUBCASE("the last context row before the anchor is visible") {
        at::Tensor h = f.batch.hidden.clone();
        h.narrow(1, a - 1, 1).normal_().mul_(100);
        CHECK_FALSE(at::allclose(block_rows(run_with_hidden(h), probe, b), block_rows(base, probe, b), 1e-3, 1e-4));
    }
    SUBCASE("other blocks, even in the same attention group, are invisible") {
        std::vector<std::int64_t> moved = anchors;
        moved[1] = 8;  // block 1's anchor token and positions change
        auto blocks2 = dflash_blocks_at(f.batch.tokens, f.batch.loss_mask, cu, b, 511, moved, 7.0);
        at::Tensor out = dflash_hidden(drafter, f.head, f.batch, blocks2, opt);
        CHECK(at::allclose(block_rows(out, probe, b), block_rows(base, probe, b), 0, 1e-6));
        CHECK_FALSE(at::allclose(block_rows(out, 1, b), block_rows(base, 1, b), 1e-3, 1e-4));
    }
    SUBCASE("future tokens do not change the block's input") {
        DFlashBatch changed = f.batch;
        changed.tokens = f.batch.tokens.clone();
        changed.tokens.narrow(0, a + 1, cu[1] - a - 1).fill_(17);
        auto blocks2 = dflash_blocks_at(changed.tokens, f.batch.loss_mask, cu, b, 511, anchors, 7.0);
        at::Tensor out = dflash_hidden(drafter, f.head, changed, blocks2, opt);
        CHECK(at::allclose(block_rows(out, probe, b), block_rows(base, probe, b), 0, 1e-6));
    }
    SUBCASE("grouping does not change the result") {
        for (int g : {1, 2, 64})
            for (int pad : {16, 64, 256}) {
                opt.attention.group_blocks = g;
                opt.attention.key_pad = pad;
                CHECK(at::allclose(dflash_hidden(drafter, f.head, f.batch, blocks, opt), base, 1e-5, 1e-6));
            }
    }
}

TEST_CASE("block attention: output and every input gradient equal a dense masked reference, for any layout") {
    // Two sequences (context rows [0, 20) and [20, 45)), blocks of 4, GQA 4 query heads on 2 kv
    // heads. Reference: one fp64 softmax over all T + R keys with the DFlash mask written out.
    const std::int64_t b = 4, hq = 4, hkv = 2, d = 8, t = 45;
    const std::vector<std::int64_t> anchors{2, 9, 10, 17, 21, 30, 44}, seq_begin{0, 0, 0, 0, 20, 20, 20};
    const std::int64_t rows = static_cast<std::int64_t>(anchors.size()) * b;
    at::Generator rg = cpu_generator(5);
    auto leaf = [&](std::int64_t n, std::int64_t h) { return at::randn({n, h, d}, rg).requires_grad_(true); };
    const at::Tensor q = leaf(rows, hq), kc = leaf(t, hkv), vc = leaf(t, hkv), kb = leaf(rows, hkv), vb = leaf(rows, hkv);
    const at::Tensor go = at::randn({rows, hq, d}, rg);
    const double scale = 0.3;

    at::Tensor mask = at::zeros({rows, t + rows}, at::kBool);
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t blk = r / b;
        for (std::int64_t c = seq_begin[blk]; c < anchors[blk]; ++c) mask[r][c] = true;
        for (std::int64_t c = 0; c < b; ++c) mask[r][t + blk * b + c] = true;
    }
    auto grads_of = [&](const at::Tensor& out) {
        for (const auto& x : {q, kc, vc, kb, vb}) x.mutable_grad() = at::Tensor();
        (out.to(at::kDouble) * go.to(at::kDouble)).sum().backward();
        std::vector<at::Tensor> g;
        for (const auto& x : {q, kc, vc, kb, vb}) g.push_back(x.grad().clone());
        return g;
    };
    at::Tensor k = at::cat({kc, kb}, 0).to(at::kDouble), v = at::cat({vc, vb}, 0).to(at::kDouble);
    at::Tensor qd = q.to(at::kDouble);
    std::vector<at::Tensor> heads;
    for (std::int64_t h = 0; h < hq; ++h) {
        const std::int64_t kvh = h / (hq / hkv);  // HF repeat_kv order
        at::Tensor s = qd.select(1, h).matmul(k.select(1, kvh).t()) * scale;
        s = s.masked_fill(at::logical_not(mask), -std::numeric_limits<double>::infinity());
        heads.push_back(at::softmax(s, 1).matmul(v.select(1, kvh)));
    }
    const at::Tensor ref = at::stack(heads, 1);
    const auto ref_grads = grads_of(ref);

    for (std::int64_t group : {1, 2, 3, 64})
        for (std::int64_t pad : {1, 16, 256}) {
            INFO("group_blocks " << group << " key_pad " << pad);
            const BlockAttention plan = plan_block_attention(anchors, seq_begin, b, t,
                                                             BlockAttentionLayout{.group_blocks = group, .key_pad = pad},
                                                             hq / hkv, at::kCPU, at::kFloat);
            const at::Tensor out = block_attention(q, kc, vc, kb, vb, plan, scale);
            CHECK(at::allclose(out.to(at::kDouble), ref.detach(), 1e-5, 1e-5));
            const auto g = grads_of(out);
            for (std::size_t i = 0; i < g.size(); ++i) {
                INFO("input " << i << " max diff " << (g[i] - ref_grads[i]).abs().max().item<double>());
                CHECK(at::allclose(g[i], ref_grads[i], 1e-4, 1e-5));
            }
        }
}

TEST_CASE("block attention in bf16: context rows read by up to 63 groups get their summed gradient within 1% of fp64") {
    // One 640-token sequence, a block every 10 tokens, one block per group: context row c is in
    // the keys of every group anchored after it. Its key/value gradient is the sum of those
    // groups' gradients (GatherKeysFunction's backward, group by group into fp32). Measured
    // here: 0.49% / 0.42% (the bf16 attention's own rounding).
    const std::int64_t b = 4, hq = 4, hkv = 2, d = 16, t = 640;
    std::vector<std::int64_t> anchors, seq_begin;
    for (std::int64_t a = 10; a + b <= t; a += 10) {
        anchors.push_back(a);
        seq_begin.push_back(0);
    }
    const std::int64_t rows = static_cast<std::int64_t>(anchors.size()) * b;
    at::Generator rg = cpu_generator(9);
    const at::Tensor q = at::randn({rows, hq, d}, rg), kc = at::randn({t, hkv, d}, rg), vc = at::randn({t, hkv, d}, rg),
                     kb = at::randn({rows, hkv, d}, rg), vb = at::randn({rows, hkv, d}, rg),
                     go = at::randn({rows, hq, d}, rg);
    auto context_grads = [&](at::ScalarType dtype) {
        std::vector<at::Tensor> in;
        for (const auto& x : {q, kc, vc, kb, vb}) in.push_back(x.to(dtype).requires_grad_(true));
        const BlockAttention plan = plan_block_attention(anchors, seq_begin, b, t,
                                                         BlockAttentionLayout{.group_blocks = 1, .key_pad = 16},
                                                         hq / hkv, at::kCPU, dtype);
        block_attention(in[0], in[1], in[2], in[3], in[4], plan, 0.25).backward(go.to(dtype));
        return std::make_pair(in[1].grad().to(at::kDouble), in[2].grad().to(at::kDouble));
    };
    const auto [dk_ref, dv_ref] = context_grads(at::kDouble);
    const auto [dk, dv] = context_grads(at::kBFloat16);
    auto rel = [](const at::Tensor& x, const at::Tensor& ref) { return ((x - ref).norm() / ref.norm()).item<double>(); };
    MESSAGE("bf16 context-key gradient error " << rel(dk, dk_ref) << ", value " << rel(dv, dv_ref));
    CHECK(rel(dk, dk_ref) < 0.01);
    CHECK(rel(dv, dv_ref) < 0.01);
}

TEST_CASE("gradients reach the drafter's parameters only") {
    DFlashFixture f;
    auto drafter = f.drafter();
    TargetHead head{f.head.embed.clone().requires_grad_(true), f.head.lm_head.clone().requires_grad_(true)};
    DFlashBatch batch = f.batch;
    batch.hidden = f.batch.hidden.clone().requires_grad_(true);
    at::Generator g = cpu_generator(4);
    DFlashLossOptions opt;
    opt.num_anchors = 6;
    opt.chunk = 16;
    auto r = dflash_loss(drafter, head, batch, opt, g);
    REQUIRE(r.num_blocks > 0);
    r.loss.backward();
    CHECK_FALSE(head.embed.grad().defined());
    CHECK_FALSE(head.lm_head.grad().defined());
    for (const auto& p : drafter->named_parameters()) {
        INFO(p.key());
        REQUIRE(p.value().grad().defined());
        CHECK(p.value().grad().abs().sum().item<double>() > 0);
        CHECK(hsring::test::dt(p.value().grad().scalar_type()) == "Float");
    }
}

TEST_CASE("chunked cross-entropy equals the full-logits loss: value, accuracy and gradients") {
    DFlashFixture f;
    auto blocks_for = [&](at::Generator& g) {
        return sample_dflash_blocks(f.batch.tokens, f.batch.loss_mask, f.batch.cu_seqlens, 4, 511, 7, 7.0, g);
    };
    at::Generator g = cpu_generator(8);
    auto blocks = blocks_for(g);
    DFlashLossOptions opt;

    auto grads_of = [](DFlashDrafter& d) {
        std::vector<at::Tensor> out;
        for (auto& p : d->parameters()) out.push_back(p.grad().clone());
        d->zero_grad();
        return out;
    };
    auto drafter = f.drafter();
    // Full: all logits at once through autograd.
    at::Tensor out = dflash_hidden(drafter, f.head, f.batch, blocks, opt);
    at::Tensor logits = out.matmul(f.head.lm_head.t());
    at::Tensor ce = at::cross_entropy_loss(logits, blocks.labels, {}, at::Reduction::None);
    at::Tensor full = (ce * blocks.weights).sum() / blocks.weights.sum();
    full.backward();
    auto full_grads = grads_of(drafter);
    at::Tensor right = (logits.argmax(1) == blocks.labels) & blocks.counted;

    for (int chunk : {1, 5, 1000}) {
        INFO("chunk " << chunk);
        opt.chunk = chunk;
        auto r = dflash_loss_for_blocks(drafter, f.head, f.batch, blocks, opt);
        CHECK(r.loss.item<double>() == doctest::Approx(full.item<double>()).epsilon(1e-6));
        r.loss.backward();
        auto grads = grads_of(drafter);
        for (std::size_t i = 0; i < grads.size(); ++i) {
            const double scale = full_grads[i].abs().max().item<double>();
            INFO("param " << i << " max |grad| " << scale << " max diff " << (grads[i] - full_grads[i]).abs().max().item<double>());
            CHECK(at::allclose(grads[i], full_grads[i], 1e-4, 1e-6 * scale));
        }
        CHECK(r.correct.sum().item<double>() == right.sum().item<double>());
        CHECK(r.counted.sum().item<double>() == blocks.counted.sum().item<double>());
    }
    // The autograd function alone, against log_softmax on a random problem.
    // Seeded: the default generator's state depends on which tests ran before.
    at::Generator rg = cpu_generator(13);
    at::Tensor h = at::randn({13, 8}, rg).requires_grad_(true), w = at::randn({50, 8}, rg);
    at::Tensor y = at::randint(50, {13}, rg, at::kLong), wt = at::rand({13}, rg);
    auto c = chunked_cross_entropy(h, w, y, wt, 4);
    c.loss_sum.backward();
    at::Tensor h2 = h.detach().clone().requires_grad_(true);
    at::Tensor ref = (-at::log_softmax(h2.matmul(w.t()), 1).gather(1, y.unsqueeze(1)).squeeze(1) * wt).sum();
    ref.backward();
    CHECK(c.loss_sum.item<double>() == doctest::Approx(ref.item<double>()).epsilon(1e-6));
    // float32 sums in a different order (chunks, and the CPU's vector width): ~1e-6 relative.
    const double hscale = h2.grad().abs().max().item<double>();
    INFO("max |grad| " << hscale << " max diff " << (h.grad() - h2.grad()).abs().max().item<double>());
    CHECK(at::allclose(h.grad(), h2.grad(), 1e-4, 1e-6 * hscale));
}

TEST_CASE("chunked cross-entropy in bf16: fp32 loss, and confident rows keep their small gradient") {
    // The compute-dtype path (what the GPU runs): the logits stay bf16, the loss comes from fp32
    // log-probabilities, the label entries of the gradient from p_y - 1 in fp32. Reference: the
    // same bf16 logits upcast to fp32, differentiated exactly. Rows 0-3 are confident (p_y close
    // to 1), where rounding p_y to bf16 before subtracting 1 would lose most of the gradient.
    at::Generator rg = cpu_generator(21);
    const std::int64_t n = 24, hdim = 64, v = 300;
    at::Tensor w = (at::randn({v, hdim}, rg) * 0.5).to(at::kBFloat16);
    at::Tensor y = at::randint(v, {n}, rg, at::kLong), wt = at::rand({n}, rg) + 0.5;
    at::Tensor h32 = at::randn({n, hdim}, rg) * 0.3;
    for (std::int64_t i = 0; i < 4; ++i)  // h parallel to the label's head row: p_y ~ 1
        h32[i] = w[y[i].item<std::int64_t>()].to(at::kFloat) * 1.5;
    at::Tensor h = h32.to(at::kBFloat16).requires_grad_(true);
    auto c = chunked_cross_entropy(h, w, y, wt, 7);
    c.loss_sum.backward();

    // In fp64: 1 - p_y of a confident row is below fp32's resolution near 1.
    at::Tensor hd = h.detach().to(at::kDouble), wd = w.to(at::kDouble);
    at::Tensor logits = hd.matmul(wd.t()).to(at::kBFloat16).to(at::kDouble);  // bf16-rounded, as the GEMM
    at::Tensor logp = at::log_softmax(logits, 1);
    at::Tensor ref = (-logp.gather(1, y.unsqueeze(1)).squeeze(1) * wt.to(at::kDouble)).sum();
    // d/dh exactly for the same logits: w * (softmax - onehot) @ W, with 1 - p_y from the others.
    at::Tensor p = logp.exp();
    p.scatter_(1, y.unsqueeze(1), 0.0);
    p.scatter_(1, y.unsqueeze(1), -p.sum(1, true));
    at::Tensor gref = (p * wt.to(at::kDouble).unsqueeze(1)).matmul(wd);
    CHECK(c.loss_sum.item<double>() == doctest::Approx(ref.item<double>()).epsilon(1e-4));
    const at::Tensor py = logp.gather(1, y.unsqueeze(1)).exp();
    REQUIRE(py.narrow(0, 0, 4).min().item<double>() > 0.99);  // the confident rows are confident
    // Per row, relative to the row's gradient norm: bf16 rounding of probabilities and the
    // matmul output (2^-8 each), not the 1/(1 - p_y) blow-up of a subtraction from ~1.
    at::Tensor got = h.grad().to(at::kDouble);
    at::Tensor rel = (got - gref).norm(2, 1) / gref.norm(2, 1);
    INFO("relative row errors " << rel);
    CHECK(rel.max().item<double>() < 0.01);
}

TEST_CASE("recompute = layers: the same output, loss and every parameter gradient as keeping the activations") {
    DFlashFixture f;
    at::Generator g = cpu_generator(11);
    auto blocks = sample_dflash_blocks(f.batch.tokens, f.batch.loss_mask, f.batch.cu_seqlens, 4, 511, 6, 7.0, g);
    REQUIRE(blocks.num_blocks() > 0);
    auto drafter = f.drafter();
    auto run = [&](bool recompute) {
        DFlashLossOptions opt;
        opt.chunk = 7;
        opt.attention.group_blocks = 2;  // several attention groups per sequence
        opt.recompute_layers = recompute;
        const auto r = test::loss_and_grads(drafter, f.head, f.batch, blocks, opt);
        return std::make_pair(r.loss_sum, r.grads);
    };
    const auto [loss_kept, grads_kept] = run(false);
    const auto [loss_recomputed, grads_recomputed] = run(true);
    CHECK(loss_recomputed == doctest::Approx(loss_kept).epsilon(1e-12));
    const auto names = drafter->named_parameters().keys();
    REQUIRE(grads_kept.size() == grads_recomputed.size());
    for (std::size_t i = 0; i < grads_kept.size(); ++i) {
        INFO(names[i] << ": max diff " << (grads_recomputed[i] - grads_kept[i]).abs().max().item<double>());
        const double scale = grads_kept[i].abs().max().item<double>();
        CHECK(scale > 0);
        CHECK(at::allclose(grads_recomputed[i], grads_kept[i], 1e-5, 1e-6 * scale));
    }
    // Without grad mode (evaluation) it is a plain forward.
    at::NoGradGuard ng;
    DFlashLossOptions opt;
    opt.recompute_layers = true;
    at::Tensor a = dflash_hidden(drafter, f.head, f.batch, blocks, opt);
    opt.recompute_layers = false;
    CHECK(at::equal(a, dflash_hidden(drafter, f.head, f.batch, blocks, opt)));
}

TEST_CASE("drafter init is deterministic per seed and names match the public DFlash checkpoints") {
    DFlashFixture f;
    auto a = f.drafter(3), b = f.drafter(3), c = f.drafter(4);
    auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
    bool any_diff = false;
    for (const auto& p : pa) {
        CHECK(at::equal(p.value(), pb[p.key()]));
        any_diff = any_diff || !at::equal(p.value(), pc[p.key()]);
    }
    CHECK(any_diff);
    std::vector<std::string> names;
    for (const auto& p : pa) names.push_back(p.key());
    std::vector<std::string> want{"fc.weight", "hidden_norm.weight", "norm.weight"};
    for (int i = 0; i < 2; ++i) {
        const std::string l = "layers." + std::to_string(i) + ".";
        for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                              "self_attn.q_norm", "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
                              "input_layernorm", "post_attention_layernorm"})
            want.push_back(l + n + ".weight");
    }
    std::sort(names.begin(), names.end());
    std::sort(want.begin(), want.end());
    CHECK(bool(names == want));
    CHECK(pa["fc.weight"].sizes() == at::IntArrayRef({64, 3 * 64}));
}

TEST_CASE("export -> import reproduces the drafter bit for bit, with the DFlash config keys") {
    DFlashFixture f;
    auto drafter = f.drafter(11);
    {  // make it differ from any fresh init
        at::NoGradGuard ng;
        for (auto& p : drafter->parameters()) p.add_(at::randn_like(p) * 0.01);
    }
    TempDir dir;
    export_dflash(dir.path() / "drafter", drafter, f.config);
    auto [back, cfg] = import_dflash(dir.path() / "drafter");
    CHECK(bool(cfg.target_layer_ids == f.config.target_layer_ids));
    CHECK(cfg.mask_token_id == 511);
    CHECK(cfg.block_size == 4);
    CHECK(cfg.num_target_layers == 8);
    at::Generator g = cpu_generator(2);
    auto blocks = sample_dflash_blocks(f.batch.tokens, f.batch.loss_mask, f.batch.cu_seqlens, 4, 511, 8, 7.0, g);
    at::NoGradGuard ng;
    CHECK(at::equal(dflash_hidden(drafter, f.head, f.batch, blocks, {}), dflash_hidden(back, f.head, f.batch, blocks, {})));

    std::ifstream in(dir.path() / "drafter" / "config.json");
    auto j = nlohmann::json::parse(in);
    CHECK(j["architectures"][0] == "DFlashDraftModel");
    CHECK(j["model_type"] == "qwen3");
    CHECK(j["block_size"] == 4);
    CHECK(j["num_target_layers"] == 8);
    CHECK(j["num_hidden_layers"] == 2);
    CHECK(j["dflash_config"]["target_layer_ids"] == nlohmann::json({1, 4, 6}));
    CHECK(j["dflash_config"]["mask_token_id"] == 511);
    CHECK(j["dflash_config"]["block_size"] == 4);
    CHECK(j["dtype"] == "float32");
    // transformers' remote-code form: the public DFlash code from z-lab's hub repo.
    CHECK(j["auto_map"]["AutoModel"] == std::string(kDFlashCodeRepo) + "--dflash.DFlashDraftModel");
    CHECK(std::string(kDFlashCodeRepo) == "z-lab/Qwen3-8B-DFlash-b16");
    CHECK(load_safetensors(dir.path() / "drafter" / "model.safetensors").size() == drafter->parameters().size());

    // bf16 export for serving, and a damaged export is a clear error.
    export_dflash(dir.path() / "bf16", drafter, f.config, at::kBFloat16);
    CHECK(hsring::test::dt(load_safetensors(dir.path() / "bf16").at("fc.weight").scalar_type()) == "BFloat16");
    auto tensors = load_safetensors(dir.path() / "drafter");
    tensors.erase("layers.1.mlp.up_proj.weight");
    save_safetensors(dir.path() / "drafter" / "model.safetensors", tensors);
    CHECK(error_of([&] { import_dflash(dir.path() / "drafter"); }).find("layers.1.mlp.up_proj.weight") !=
          std::string::npos);
}

TEST_CASE("evaluation: the training loss and accuracy at the same blocks, no gradients, sums add over batches") {
    DFlashFixture f;
    auto drafter = f.drafter();
    const auto& cu = f.batch.cu_seqlens;
    DFlashLossOptions opt;
    opt.num_anchors = 4;
    opt.gamma = 5.0;
    opt.chunk = 7;
    const std::vector<std::uint64_t> ids{20, 21, 22};
    auto blocks = eval_dflash_blocks(f.batch.tokens, f.batch.loss_mask, cu, 4, 511, 4, 5.0, 3, ids);
    auto train = dflash_loss_for_blocks(drafter, f.head, f.batch, blocks, opt);
    at::Tensor out;
    DFlashEvalSums e = evaluate_dflash(drafter, f.head, f.batch, blocks, opt, &out);
    CHECK_FALSE(out.requires_grad());
    CHECK(out.sizes() == at::IntArrayRef({blocks.rows(), 64}));
    CHECK(e.num_blocks == blocks.num_blocks());
    CHECK(e.loss() == doctest::Approx(train.loss.item<double>()).epsilon(1e-6));
    CHECK(e.weight_sum == doctest::Approx(train.weight_sum.item<double>()));
    REQUIRE(e.correct.size() == 3);
    for (std::size_t k = 0; k < 3; ++k) {
        CHECK(e.correct[k] == train.correct[static_cast<std::int64_t>(k)].item<double>());
        CHECK(e.counted[k] == train.counted[static_cast<std::int64_t>(k)].item<double>());
    }
    const auto acc = e.accuracy();
    CHECK(e.accept_length() == doctest::Approx(hsring::expected_accept_length(acc.data(), acc.size())));
    // The sample-id form draws the same blocks.
    DFlashEvalSums by_id = evaluate_dflash(drafter, f.head, f.batch, ids, 3, opt);
    CHECK(by_id.loss_sum == doctest::Approx(e.loss_sum));
    CHECK(bool(by_id.counted == e.counted));
    // Each sequence alone, summed: the batch's sums (evaluation anchors follow the sample id).
    DFlashEvalSums parts;
    for (std::size_t s = 0; s + 1 < cu.size(); ++s) {
        const std::int64_t len = cu[s + 1] - cu[s];
        DFlashBatch one{f.batch.hidden.narrow(1, cu[s], len), f.batch.tokens.narrow(0, cu[s], len),
                        f.batch.loss_mask.narrow(0, cu[s], len), {0, len}};
        parts.add(evaluate_dflash(drafter, f.head, one, {ids[s]}, 3, opt));
    }
    CHECK(parts.num_blocks == e.num_blocks);
    CHECK(parts.loss_sum == doctest::Approx(e.loss_sum).epsilon(1e-5));
    CHECK(bool(parts.counted == e.counted));
    CHECK(bool(parts.correct == e.correct));
    // Nothing to evaluate: zero loss, acceptance 1.
    DFlashBatch untrained = f.batch;
    untrained.loss_mask = at::zeros_like(f.batch.loss_mask);
    DFlashEvalSums zero = evaluate_dflash(drafter, f.head, untrained, ids, 3, opt);
    CHECK(zero.num_blocks == 0);
    CHECK(zero.loss() == 0.0);
    CHECK(zero.accept_length() == 1.0);
}

TEST_CASE("a batch without any trainable anchor gives an empty, zero loss") {
    DFlashFixture f;
    auto drafter = f.drafter();
    DFlashBatch batch = f.batch;
    batch.loss_mask = at::zeros_like(f.batch.loss_mask);
    at::Generator g = cpu_generator(1);
    auto r = dflash_loss(drafter, f.head, batch, {}, g);
    CHECK(r.num_blocks == 0);
    CHECK(r.loss.item<double>() == 0.0);
}

TEST_CASE("AdamW steps on one batch lower the loss and raise the accuracy") {
    DFlashFixture f;
    auto drafter = f.drafter();
    torch::optim::AdamW opt(drafter->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.0));
    DFlashLossOptions o;
    o.num_anchors = 8;
    at::Generator g = cpu_generator(6);
    auto blocks = sample_dflash_blocks(f.batch.tokens, f.batch.loss_mask, f.batch.cu_seqlens, 4, 511, 8, 7.0, g);
    double first = 0, last = 0, acc0 = 0, acc = 0;
    for (int step = 0; step < 40; ++step) {
        opt.zero_grad();
        auto r = dflash_loss_for_blocks(drafter, f.head, f.batch, blocks, o);
        r.loss.backward();
        opt.step();
        last = r.loss.item<double>();
        acc = (r.correct.sum() / r.counted.sum()).item<double>();
        if (step == 0) first = last, acc0 = acc;
    }
    // A random tiny target's LM head gives small logits (std 0.02 weights): learning is slow
    // but visible.
    MESSAGE("loss " << first << " -> " << last << ", accuracy " << acc0 << " -> " << acc);
    CHECK(last < 0.8 * first);
    CHECK(acc > acc0 + 0.1);
}

TEST_CASE("the step's FLOP count: layers, context k/v, attention over the keys each row sees (the grouped and padded rest apart), fc, LM head on scored rows") {
    // A shape small enough to count by hand: H 8, 2 query heads and 1 kv head of 4 dims (q 8,
    // kv 4), I 16, V 50, 2 layers, 3 captured layers, block 4.
    DFlashConfig c;
    c.hidden_size = 8;
    c.num_layers = 2;
    c.num_heads = 2;
    c.num_kv_heads = 1;
    c.head_dim = 4;
    c.intermediate_size = 16;
    c.vocab_size = 50;
    c.block_size = 4;
    c.target_layer_ids = {1, 2, 3};
    // Two sequences [0, 20) and [20, 40); 4 blocks (16 rows), groups of at most 2 blocks:
    // {3, 7} (keys 7 + 8 -> padded to 256), {12} (12 + 4 -> 256), {25} in the second (5 + 4 -> 256).
    const DFlashStepFlops f = dflash_step_flops(c, 40, {3, 7, 12, 25}, {0, 0, 0, 20}, 11, BlockAttentionLayout{.group_blocks = 2});
    // per layer 2 x 16 rows x (q 8x8 + k,v 2x8x4 + o 8x8 + gate,up,down 3x8x16) = 18,432; x 3 (fwd + bwd) x 2 layers
    CHECK(f.layers == 110592.0);
    // per layer k and v: 2 x 2 x 40 x 8 x 4 = 5,120; x 3 x 2
    CHECK(f.context_kv == 30720.0);
    // Useful, per layer and block: QK^T + PV = 2 x 2 x (2 heads x 4 rows) x 4 x keys = 128 x keys, keys =
    // context before the anchor + the block's 4: 3 + 4, 7 + 4, 12 + 4, (25 - 20) + 4 = 43 keys; x 3 x 2
    CHECK(f.attention == 33024.0);
    // Computed, per layer and group: 2 x 2 x (2 heads x rows) x 4 x 256 = 8,192 x rows; 16 rows; x 3 x 2 =
    // 786,432, of which all but the useful part is over padding and masked keys.
    CHECK(f.attention_padded == 786432.0 - 33024.0);
    // forward + weight gradient: 2 x 2 x 40 x 24 x 8
    CHECK(f.fc == 30720.0);
    // logits + d(hidden) of the 11 scored rows: 2 x 2 x 11 x 8 x 50
    CHECK(f.lm_head == 17600.0);
    CHECK(f.total() == 976064.0 - 786432.0 + 33024.0);  // the useful work
    CHECK(f.computed() == 976064.0);                    // what runs
    CHECK(dflash_step_flops(c, 40, {}, {}, 0, BlockAttentionLayout{.group_blocks = 2}).total() == 0.0);

    // From sampled blocks: the scored rows are the weighted ones, the groups those attention runs.
    DFlashFixture fx;
    at::Generator g = cpu_generator(3);
    auto blocks = sample_dflash_blocks(fx.batch.tokens, fx.batch.loss_mask, fx.batch.cu_seqlens, 4, 511, 5, 7.0, g);
    REQUIRE(blocks.num_blocks() > 0);
    const auto& dc = fx.config;
    const std::int64_t t = fx.batch.tokens.size(0);
    const DFlashStepFlops s = dflash_step_flops(dc, t, blocks, BlockAttentionLayout{.group_blocks = 3});
    const auto scored = (blocks.weights > 0).sum().item<std::int64_t>();
    CHECK(s.lm_head == 4.0 * double(scored) * double(dc.hidden_size) * double(dc.vocab_size));
    double keys = 0, seen = 0;
    for (const auto& grp : plan_block_attention(blocks.anchors, blocks.seq_begin, 4, t, BlockAttentionLayout{.group_blocks = 3}, 1, at::kCPU, at::kFloat).groups)
        keys += double(grp.rows) * double(grp.key_len);
    for (std::size_t b = 0; b < blocks.anchors.size(); ++b)
        seen += 4.0 * double(blocks.anchors[b] - blocks.seq_begin[b] + 4);
    const double per_key = double(dc.num_layers) * 3 * 4 * double(dc.num_heads * dc.head_dim);
    CHECK(s.attention == doctest::Approx(per_key * seen));
    CHECK(s.attention + s.attention_padded == doctest::Approx(per_key * keys));
    CHECK(s.attention_padded > 0);
}

} // TEST_SUITE
