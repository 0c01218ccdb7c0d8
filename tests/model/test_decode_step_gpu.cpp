// The decode step's kernels (src/kernels/rms_norm_rows, cached_attention; decode_step_ops.hpp) on
// the GPU (and gemv_rows) against the ATen composition they replace, run on the CPU on the same inputs: every
// output, and the keys and values written into the cache.
#include "model/ops/decode_step_ops.hpp"
#include "model/ops/ops.hpp"
#include "model_test_util.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <tuple>
#include <vector>

using namespace hsring;
using namespace hsring::model;

namespace {

const at::Device kStepCuda("cuda:0");

struct StepCase {
    at::ScalarType dtype;
    std::int64_t heads, kv_heads, head_dim, n;
};

} // namespace

TEST_SUITE("gpu") {

TEST_CASE("decode step kernels on the GPU equal their ATen composition on the CPU (add + norm, qkv into the cache, cached attention)") {
    test::require_gpu_or_skip();
    // Qwen3-8B's heads (32 / 8 of 128) and the tiny preset's (4 / 2 of 16); plain decoding (n = 1)
    // and a 16-token verify step; rows of different lengths; a window that is not a whole tile.
    for (const StepCase c : {StepCase{at::kBFloat16, 32, 8, 128, 1}, StepCase{at::kBFloat16, 32, 8, 128, 16},
                         StepCase{at::kFloat, 32, 8, 128, 16}, StepCase{at::kFloat, 4, 2, 16, 1}, StepCase{at::kFloat, 4, 2, 16, 4}}) {
        INFO("dtype " << c10::toString(c.dtype) << ", heads " << c.heads << "/" << c.kv_heads << " x " << c.head_dim
                      << ", n " << c.n);
        const double tol = c.dtype == at::kFloat ? 1e-5 : 1.5e-2;
        at::manual_seed(7);
        const std::int64_t rows = 2, cap = 300, d = c.head_dim, t = rows * c.n, width = 4096;
        const std::vector<std::int64_t> lengths{100, 250};
        const std::int64_t window = 270;  // >= 250 + 16, not a multiple of 32
        std::vector<std::int64_t> pos;
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t i = 0; i < c.n; ++i) pos.push_back(lengths[static_cast<std::size_t>(r)] + i);
        const at::Tensor positions = at::tensor(pos, at::kLong);
        const at::Tensor slot = at::arange(rows, at::kLong).mul(cap).repeat_interleave(c.n) + positions;
        const auto opts = at::TensorOptions().dtype(c.dtype);
        const at::Tensor qkv = at::randn({t, (c.heads + 2 * c.kv_heads) * d}).to(c.dtype);
        const at::Tensor q_norm = (at::rand({d}) + 0.5).to(c.dtype), k_norm = (at::rand({d}) + 0.5).to(c.dtype);
        const at::Tensor keys = at::randn({rows, cap, c.kv_heads, d}).to(c.dtype), values = at::randn_like(keys);
        const RopeTables rope = rope_tables(rope_inv_freq(d, 1e6, {}), positions, c.dtype);
        const RopeTables rope_gpu{rope.cos.to(kStepCuda), rope.sin.to(kStepCuda)};
        const CachedHeads h{c.heads, c.kv_heads, d};
        const double scale = 1.0 / std::sqrt(static_cast<double>(d));
        for (const bool norms : {true, false}) {
            INFO("q/k norms " << norms);
            const at::Tensor qn = norms ? q_norm : at::Tensor(), kn = norms ? k_norm : at::Tensor();
            at::Tensor kc = keys.clone(), vc = values.clone();
            at::Tensor kg = keys.to(kStepCuda), vg = values.to(kStepCuda);
            const at::Tensor q_cpu = qkv_to_cache(qkv, h, qn, kn, 1e-6, rope, slot, kc, vc);
            const at::Tensor q_gpu = qkv_to_cache(qkv.to(kStepCuda), h, norms ? qn.to(kStepCuda) : at::Tensor(),
                                                  norms ? kn.to(kStepCuda) : at::Tensor(), 1e-6, rope_gpu, slot.to(kStepCuda), kg, vg);
            CHECK(test::relative_error(q_gpu, q_cpu) < tol);
            CHECK(test::relative_error(kg, kc) < tol);
            CHECK(at::equal(vg.cpu(), vc));  // v is copied, not computed
            const at::Tensor o_cpu = cached_attention(q_cpu, kc, vc, positions, c.n, window, scale);
            const at::Tensor o_gpu = cached_attention(q_cpu.to(kStepCuda), kc.to(kStepCuda), vc.to(kStepCuda), positions.to(kStepCuda),
                                                      c.n, window, scale);
            CHECK(o_gpu.sizes() == o_cpu.sizes());
            CHECK(test::relative_error(o_gpu, o_cpu) < tol);
            CHECK(at::isfinite(o_gpu).all().item<bool>());
        }
        // Residual add + RMSNorm, with and without the residual.
        const at::Tensor x = at::randn({t, width}, opts), res = at::randn({t, width}, opts);
        const at::Tensor w = (at::rand({width}) + 0.5).to(c.dtype);
        const SumAndNorm cpu = add_rms_norm(x, res, w, 1e-6), gpu = add_rms_norm(x.to(kStepCuda), res.to(kStepCuda), w.to(kStepCuda), 1e-6);
        CHECK(at::equal(gpu.sum.cpu(), cpu.sum));  // one rounding of the same fp32 sum
        CHECK(test::relative_error(gpu.normed, cpu.normed) < tol);
        const SumAndNorm cpu1 = add_rms_norm(x, {}, w, 1e-6), gpu1 = add_rms_norm(x.to(kStepCuda), {}, w.to(kStepCuda), 1e-6);
        CHECK(test::relative_error(gpu1.normed, cpu1.normed) < tol);
    }
}

TEST_CASE("decode step GEMV on the GPU: one row against a weight [out, in] equals the fp64 product") {
    test::require_gpu_or_skip();
    at::manual_seed(3);
    // Qwen3-8B's down projection (in 12,288), an odd number of rows (a partial block), the tiny
    // preset's width, and fp32.
    for (const auto& [dtype, in, out] : std::vector<std::tuple<at::ScalarType, std::int64_t, std::int64_t>>{
             {at::kBFloat16, 4096, 6144}, {at::kBFloat16, 12288, 37}, {at::kBFloat16, 16, 101}, {at::kFloat, 4096, 333}}) {
        INFO("dtype " << c10::toString(dtype) << ", " << out << " x " << in);
        const at::Tensor x = at::randn({1, in}, at::TensorOptions().device(kStepCuda)).to(dtype);
        const at::Tensor w = (at::randn({out, in}, at::TensorOptions().device(kStepCuda)) * 0.02).to(dtype);
        // The GEMV itself, not dense()'s equal numbers: its precondition once failed on every
        // call from the decode step and the step silently ran cuBLAS (issue 35).
        CHECK(dense_rows_on_kernel(x, w));
        // More rows: the tensor-core kernel, bf16 / fp16 with in a multiple of 32 (the tiny width of
        // 16 takes one row only, on the SIMT kernel).
        CHECK(dense_rows_on_kernel(x.repeat({2, 1}), w) == (dtype != at::kFloat && in % 32 == 0));
        CHECK_FALSE(dense_rows_on_kernel(x.repeat({17, 1}), w));
        const at::Tensor y = dense_rows(x, w);
        CHECK((y.sizes() == at::IntArrayRef{1, out}));
        const at::Tensor want = at::matmul(x.to(at::kDouble), w.to(at::kDouble).t());
        CHECK(test::relative_error(y, want) < (dtype == at::kFloat ? 1e-6 : 8e-3));
        // Two rows (fp32: dense(), cuBLAS): the same product.
        CHECK(test::relative_error(dense_rows(x.repeat({2, 1}), w).narrow(0, 1, 1), want) < (dtype == at::kFloat ? 1e-5 : 8e-3));
    }
}

TEST_CASE("decode step GEMV on the GPU: 1-16 rows in bf16 / fp16 equal the fp64 product, each row bit for bit as if alone") {
    test::require_gpu_or_skip();
    at::manual_seed(5);
    // A verify step's 16 rows, rows that are not a whole half-tile (3, 9), Qwen3-8B's qkv and down
    // projections, a partial block of weight rows (37, 101), and the narrowest width (32).
    for (const at::ScalarType dtype : {at::kBFloat16, at::kHalf})
        for (const auto& [in, out] : std::vector<std::pair<std::int64_t, std::int64_t>>{{4096, 6144}, {12288, 37}, {32, 101}})
            for (const std::int64_t rows : {1, 3, 9, 16}) {
                INFO(c10::toString(dtype) << ", " << rows << " rows, " << out << " x " << in);
                const at::Tensor x = at::randn({rows, in}, at::TensorOptions().device(kStepCuda)).to(dtype);
                const at::Tensor w = (at::randn({out, in}, at::TensorOptions().device(kStepCuda)) * 0.02).to(dtype);
                REQUIRE(dense_rows_on_kernel(x, w));
                const at::Tensor y = dense_rows(x, w);
                CHECK((y.sizes() == at::IntArrayRef{rows, out}));
                const at::Tensor want = at::matmul(x.to(at::kDouble), w.to(at::kDouble).t());
                CHECK(test::relative_error(y, want) < 8e-3);
                CHECK(at::isfinite(y).all().item<bool>());
                // Why a 16-token verify step and plain decoding agree in bf16: the same bits per row.
                for (std::int64_t r = 0; r < rows; ++r) CHECK(at::equal(y.narrow(0, r, 1), dense_rows(x.narrow(0, r, 1), w)));
            }
}

} // TEST_SUITE
