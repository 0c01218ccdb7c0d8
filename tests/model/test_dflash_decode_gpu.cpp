// The DFlash drafter's decode state on the GPU (the decode step's kernels: the GEMV for 1-16 rows,
// add + norm, q/k norm + rotation + cache write, cached attention) against the same state on the
// CPU in fp32 (the ATen composition), through extends, crops, the fixed shapes a CUDA graph
// captures and rows of other lengths and block sizes; in fp32 and bf16, at a drafter whose heads
// are Qwen3-8B's (128-wide, 4 query heads per kv head) so that every kernel takes the shape.
#include "decode_fixture.hpp"
#include "model/ops/decode_step_ops.hpp"

using namespace hsring;
using namespace hsring::model;
using namespace hsring::test;

TEST_SUITE("gpu") {

TEST_CASE("DFlash decode state on the GPU (decode-step kernels) drafts what the CPU state drafts") {
    require_gpu_or_skip();
    const at::Device cuda("cuda:0");
    ModelShape shape = preset_shape("tiny");
    shape.hidden_size = 512;
    shape.num_heads = 8;
    shape.num_kv_heads = 2;
    shape.head_dim = 128;
    shape.intermediate_size = 1024;
    shape.num_layers = 6;
    auto m = TargetModel::load(shape, at::kCPU, at::kFloat, 12);
    const DFlashConfig cfg = dflash_config_for(m.shape(), 2, 16, -1, {1, 3});
    DFlashDrafter d = perturbed_drafter(cfg, 9);
    const auto seq = iota_tokens(300, 11, 5);
    const at::Tensor ctx = captured_layers(m, seq, cfg.target_layer_ids);  // [2, 300, H]
    at::NoGradGuard ng;
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
        INFO(c10::toString(dtype));
        const double tol = dtype == at::kFloat ? 2e-4 : 6e-2;
        auto close = [&](const at::Tensor& got, const at::Tensor& want) {
            const double diff = (got.to(at::kCPU, at::kFloat) - want).abs().max().item<double>();
            INFO("max |diff| " << diff);
            CHECK(diff <= tol * (1.0 + want.abs().max().item<double>()));
        };
        DFlashDecodeState cpu(d, m.head(), 1, 280, at::kCPU, at::kFloat);
        DFlashDecodeState gpu(d, m.head(), 1, 280, cuda, dtype);
        auto extend = [&](std::int64_t from, std::int64_t n) {
            cpu.extend(ctx.narrow(1, from, n), {n});
            gpu.extend(ctx.narrow(1, from, n).to(cuda), {n});
        };
        auto check_at = [&](std::int64_t b) {
            const std::int64_t start = cpu.length(0);
            INFO("anchor " << start << ", block " << b);
            REQUIRE(gpu.length(0) == start);
            const std::int64_t last = seq[static_cast<std::size_t>(start)];
            const at::Tensor want = cpu.draft({last}, {b})[0];
            close(gpu.draft({last}, {b})[0], want);
            std::vector<std::int64_t> longs{last};
            for (std::int64_t j = 1; j < b; ++j) longs.push_back(cfg.mask_token_id);
            for (std::int64_t j = 0; j < b; ++j) longs.push_back(start + j);
            for (std::int64_t j = 0; j < b; ++j) longs.push_back(start + b - 1);
            for (const std::int64_t window : {start + b, gpu.key_capacity()})
                close(gpu.draft_fixed(at::tensor(longs, at::kLong).to(cuda), b, window)[0], want);
        };
        extend(0, 150);  // a prompt
        check_at(16);
        extend(150, 7);  // a verify step's accepted rows
        check_at(16);
        extend(157, 16);
        cpu.crop(0, 165);
        gpu.crop(0, 165);
        check_at(9);  // a short block
        extend(165, 115);
        check_at(16);  // the context full: the block in the scratch after it

        // Rows of other lengths and block sizes, as tau during training drafts them.
        DFlashDecodeState cpu_rows(d, m.head(), 3, 280, at::kCPU, at::kFloat);
        DFlashDecodeState gpu_rows(d, m.head(), 3, 280, cuda, dtype);
        const at::Tensor packed = at::cat({ctx.narrow(1, 0, 40), ctx.narrow(1, 0, 200), ctx.narrow(1, 0, 3)}, 1);
        cpu_rows.extend(packed, {40, 200, 3});
        gpu_rows.extend(packed.to(cuda), {40, 200, 3});
        const std::vector<std::int64_t> lasts{seq[40], seq[200], seq[3]}, blocks{16, 5, 12};
        const at::Tensor want = cpu_rows.draft(lasts, blocks), got = gpu_rows.draft(lasts, blocks);
        for (std::int64_t r = 0; r < 3; ++r) {
            INFO("row " << r);
            const std::int64_t b = blocks[static_cast<std::size_t>(r)];
            close(got[r].narrow(0, 0, b), want[r].narrow(0, 0, b));
        }
    }
    // The projections of a bf16 block take the GEMV (a fallback gives the same numbers, slower).
    const at::Tensor block = at::randn({16, shape.hidden_size}, at::TensorOptions().device(cuda).dtype(at::kBFloat16));
    CHECK(dense_rows_on_kernel(block, at::randn({640, shape.hidden_size}, block.options())));
}

} // TEST_SUITE
