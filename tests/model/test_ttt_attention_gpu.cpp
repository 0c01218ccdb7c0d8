// The EAGLE-3 training-time-test attention's flash path (model/ops/ttt_attention.hpp: flash varlen
// over step 0's keys merged with the diagonal keys by log-sum-exp, its own backward) against the
// eager composition in fp32 on the same inputs: output and the gradients of q and of every step's
// keys and values, for packed sequences of different lengths, grouped heads and 1..4 steps.
#include "model/ops/ttt_attention.hpp"
#include "model_test_util.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <tuple>
#include <vector>

using namespace hsring;
using namespace hsring::model;

namespace {

const at::Device kTttCuda("cuda:0");

} // namespace

TEST_SUITE("gpu") {

TEST_CASE("EAGLE-3 ttt attention on the GPU: the flash path equals the eager fp32 composition, forward and backward") {
    test::require_gpu_or_skip();
    at::manual_seed(11);
    // Qwen3-8B's heads (32 q / 8 kv, 128), tiny grouped heads, and one q head per kv head.
    for (const auto& [hq, hkv, d] : std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>{
             {32, 8, 128}, {4, 2, 16}, {2, 2, 64}}) {
        for (const int steps : {1, 2, 4}) {
            INFO(hq << " q heads, " << hkv << " kv heads, dim " << d << ", " << steps << " steps");
            const std::vector<std::int64_t> cu{0, 37, 38, 200, 456};  // a one-row sequence, uneven lengths
            const std::int64_t r = cu.back();
            const PackedSequences seqs = PackedSequences::make(cu, r, kTttCuda, "test");
            auto bf16 = [&](std::vector<std::int64_t> shape) {
                return at::randn(shape, at::TensorOptions().device(kTttCuda)).to(at::kBFloat16).requires_grad_(true);
            };
            const at::Tensor q = bf16({r, hq, d});
            std::vector<at::Tensor> keys, values;
            for (int s = 0; s < steps; ++s) {
                keys.push_back(bf16({r, hkv, d}));
                values.push_back(bf16({r, hkv, d}));
            }
            const double scale = 1.0 / std::sqrt(static_cast<double>(d));
            REQUIRE(ttt_attention_flash(q, seqs));
            const at::Tensor out = ttt_attention(q, keys, values, seqs, {}, scale);
            REQUIRE((out.sizes() == q.sizes()));
            CHECK((out.scalar_type() == at::kBFloat16));

            // The reference: the same inputs in fp32 through the eager path.
            auto f32 = [](const at::Tensor& t) { return t.detach().to(at::kFloat).requires_grad_(true); };
            const at::Tensor qf = f32(q);
            std::vector<at::Tensor> kf, vf;
            for (int s = 0; s < steps; ++s) {
                kf.push_back(f32(keys[static_cast<std::size_t>(s)]));
                vf.push_back(f32(values[static_cast<std::size_t>(s)]));
            }
            const at::Tensor want = ttt_attention_eager(qf, kf, vf, packed_causal_mask(seqs, kTttCuda), scale);
            CHECK(test::relative_error(out, want) < 1e-2);

            const at::Tensor d_out = at::randn_like(want);
            out.backward(d_out.to(at::kBFloat16));
            want.backward(d_out);
            CHECK(test::relative_error(q.grad(), qf.grad()) < 2e-2);
            for (int s = 0; s < steps; ++s) {
                INFO("step " << s);
                const auto i = static_cast<std::size_t>(s);
                CHECK(test::relative_error(keys[i].grad(), kf[i].grad()) < 2e-2);
                CHECK(test::relative_error(values[i].grad(), vf[i].grad()) < 2e-2);
            }
        }
    }
}

} // TEST_SUITE
