// hsring-bench-drafter --type eagle3: one EAGLE-3 training step as the drafter worker trains it
// (eagle3_loss over the training-time test -> loss_sum backward -> FusedAdamW dividing by
// weight_sum, clip 1) at a target preset's dims, on random hidden states of the 4 captured layers
// (3 fused + the last), next to the same step in PyTorch eager (bench/python/eagle3_eager.py).
#include "bench_eagle3.hpp"

#include "eagle3_flops.hpp"
#include "gpu_memory.hpp"
#include "hsring/model_shape.hpp"
#include "model/drafter/eagle3/loss.hpp"
#include "model/drafter/eagle3/trainable.hpp"
#include "model/drafter/interface/modules.hpp"
#include "model/ops/fused_adamw.hpp"
#include "model/ops/kineto_trace.hpp"
#include "model/target/target.hpp"

#include <fmt/ranges.h>
#include <torch/optim/adamw.h>

#include <cmath>

namespace hsring::bench {

int eagle3_mode(const Options& o) {
    using namespace hsring::model;
    const bool json = o.flag("json");
    auto& out = json ? stderr : stdout;  // --json: stdout holds the result line only
    // What the DFlash mode's other paths do has no EAGLE-3 counterpart here yet.
    if (!o.str("workload").empty()) fail("--type eagle3 has no --workload: its defaults are SpecForge's EAGLE-3 trainer's");
    if (o.num("compare-matmul") != 0) fail("--type eagle3 does not take --compare-matmul");
    if (o.str("matmul") != "bf16" || o.str("lm-head") != "bf16" || o.str("recompute") != "none")
        fail("--type eagle3 trains in the compute dtype without recompute: --matmul, --lm-head and --recompute "
             "are DFlash's");
    const at::Device dev = bench_device(o.str("device"));
    if (dev.is_cuda() && !have_gpu("hsring-bench-drafter")) return 77;
    if (!dev.is_cuda()) fmt::print(out, "hsring-bench-drafter: CPU smoke run (checks the benchmark, measures nothing useful)\n");

    const ModelShape shape = preset_shape(o.str("preset"));
    const std::int64_t len = o.num("seq-len"), samples = o.num("samples"), total = len * samples;
    const int steps = static_cast<int>(o.num("ttt-steps"));
    const int warmup = static_cast<int>(o.num("warmup")), iters = static_cast<int>(o.num("iters"));
    if (len < 2 || samples < 1) fail("--seq-len must be >= 2 and --samples >= 1, got {} and {}", len, samples);
    if (steps < 1) fail("--ttt-steps must be >= 1, got {}", steps);
    if (iters < 1 || warmup < 0) fail("--iters must be >= 1 and --warmup >= 0, got {} and {}", iters, warmup);
    const std::int64_t draft_vocab = o.num("draft-vocab") > 0 ? std::min(o.num("draft-vocab"), shape.vocab_size)
                                                              : shape.vocab_size;
    const double decay = DrafterTrainOptions{}.ttt_decay;  // [train] ttt_decay's default, 0.8
    const at::ScalarType compute = default_compute_dtype(dev);
    const std::vector<int> layer_ids = eagle3_layer_ids(shape.num_layers);

    std::optional<nlohmann::json> eager;
    if (!o.flag("no-eager"))
        eager = run_eager(o.str("python"), o.str("script"),
                          fmt::format("--preset {} --seq-len {} --samples {} --ttt-steps {} --decay {} --draft-vocab {} "
                                      "--iters {} --warmup {} --device {}",
                                      o.str("preset"), len, samples, steps, decay, draft_vocab, iters, warmup,
                                      o.str("device")));

    // Random inputs from seeded default generators: runs of one shape train on the same data.
    const auto seed = static_cast<std::uint64_t>(o.num("seed"));
    at::manual_seed(seed);
    TargetHead head = load_target_head(shape, dev, compute, seed);
    DrafterBatch batch;
    batch.hidden = at::randn({4, total, shape.hidden_size}, at::TensorOptions().device(dev).dtype(compute));
    const at::Tensor tokens_host = at::randint(shape.vocab_size, {total}, at::TensorOptions().dtype(at::kLong));
    batch.tokens = tokens_host.to(dev);
    batch.loss_mask = at::ones({total}, at::TensorOptions().device(dev));
    batch.loss_mask_host = batch.loss_mask.cpu();
    for (std::int64_t s = 0; s <= samples; ++s) batch.cu_seqlens.push_back(s * len);

    // The drafter as the worker builds it: the draft vocabulary from the data's token counts (here
    // the batch's), the target's LM head rows of it.
    DrafterSpec spec;
    spec.type = "eagle3";
    spec.target = shape;
    spec.layer_ids = layer_ids;
    spec.draft_vocab = draft_vocab;
    spec.head = &head;
    spec.token_counts.assign(static_cast<std::size_t>(shape.vocab_size), 0);
    const std::int64_t* t = tokens_host.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < total; ++i) ++spec.token_counts[static_cast<std::size_t>(t[i])];
    const std::unique_ptr<TrainableDrafter> trainable = Eagle3Trainable::create(spec, seed, dev);
    Eagle3Drafter drafter = static_cast<Eagle3Trainable&>(*trainable).drafter();
    drafter->train();
    torch::optim::AdamW adam(drafter->parameters(), torch::optim::AdamWOptions(o.real("lr")).weight_decay(0.0));
    FusedAdamW fused_adam(adam);

    // One training step: the loss's sums read once after the backward (the worker's one sync per
    // batch), then the fused step divides the gradients by weight_sum and clips them to norm 1.
    double loss = 0;
    auto train_step = [&] {
        adam.zero_grad();
        DrafterLoss r = eagle3_loss(drafter, head, batch, steps, decay, compute);
        r.loss_sum.backward();
        const at::Tensor sums = at::stack({r.loss_sum.detach(), r.weight_sum}).to(at::kCPU, at::kDouble);
        const double weight = sums[1].item<double>();
        loss = sums[0].item<double>() / weight;
        if (weight > 0) fused_adam.step(weight, 1.0);
    };
    reset_peak_memory(dev.is_cuda());
    const double step = seconds_per_iter(dev, train_step, warmup, iters);
    const auto peak_bytes = memory_stats(dev.is_cuda()).peak_allocated;

    // The step's useful matmul work and the GEMM rate of its main shape, [rows x H] x [H x I], in
    // the compute dtype, measured now on the warm device.
    const Eagle3Config& c = drafter->config();
    const std::vector<std::int64_t> seq_lens(static_cast<std::size_t>(samples), len);
    const Eagle3StepFlops flops = eagle3_step_flops(seq_lens, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim,
                                                    c.intermediate_size, c.draft_vocab_size, steps);
    const std::int64_t rows = samples * (len - 1);
    const double gemm = gemm_tflops(dev, compute, rows, c.hidden_size, c.intermediate_size);
    const double tflops = flops.total() / step / 1e12;

    if (!o.str("trace").empty()) {
        model::write_kineto_trace(o.str("trace"), dev.is_cuda(), 2, train_step);
        fmt::print(out, "trace of 2 steps: {}\n", o.str("trace"));
    }
    fmt::print(out, "drafter {} eagle3 (fused layers [{}], last {}): {} samples x {} tokens ({} rows), {} TTT steps, "
                    "draft vocab {}, {} compute / fp32 master: {:.1f} ms/step, {:.2f} samples/s, {:.0f} tok/s, "
                    "loss {:.4f}, peak {:.2f} GiB\n",
               o.str("preset"), fmt::join(c.aux_layer_ids, ", "), c.last_layer_id, samples, len, rows, steps,
               c.draft_vocab_size, c10::toString(compute), step * 1e3, samples / step, double(total) / step, loss,
               double(peak_bytes) / (1u << 30));
    fmt::print(out, "matmul work: {:.2f} TFLOP per step (layers {:.2f}, attention {:.2f}, fc {:.2f}, LM head {:.2f}, "
                    "target distribution {:.2f}) -> {:.1f} TFLOP/s; GEMM {}x{}x{} {} {:.1f} TFLOP/s; ratio {:.2f}\n",
               flops.total() / 1e12, flops.layers / 1e12, flops.attention / 1e12, flops.fc / 1e12,
               flops.lm_head / 1e12, flops.target / 1e12, tflops, rows, c.hidden_size, c.intermediate_size,
               c10::toString(compute), gemm, tflops / gemm);
    // Not useful work, so not in the TFLOP/s above: the target's distribution at positions no step scores.
    fmt::print(out, "unscored target distribution: {:.3f} TFLOP per step more (eagle3_loss forms it at every position, "
                    "each sequence's first too), not counted -> {:.1f} TFLOP/s computed\n",
               flops.target_unscored / 1e12, flops.computed() / step / 1e12);
    const double eager_step = eager ? eager->value("step_s", -1.0) : -1.0;
    bench::print_eager_ratio(out, samples, step, eager);
    if (json) {
        nlohmann::json j{{"mode", "drafter"},
                         {"type", "eagle3"},
                         {"preset", o.str("preset")},
                         {"device", dev.str()},
                         {"compute_dtype", c10::toString(compute)},
                         {"samples", samples},
                         {"seq_len", len},
                         {"rows", rows},
                         {"ttt_steps", steps},
                         {"decay", decay},
                         {"draft_vocab", c.draft_vocab_size},
                         {"layer_ids", layer_ids},
                         {"iters", iters},
                         {"step_s", step},
                         {"samples_per_s", samples / step},
                         {"tokens_per_s", double(total) / step},
                         {"loss", loss},
                         {"peak_allocated_bytes", peak_bytes},
                         {"flops", {{"fc", flops.fc}, {"layers", flops.layers}, {"attention", flops.attention},
                                    {"lm_head", flops.lm_head}, {"target", flops.target}, {"total", flops.total()},
                                    {"target_unscored", flops.target_unscored}, {"computed", flops.computed()}}},
                         {"tflops_per_s", tflops},
                         {"gemm", {{"m", rows}, {"k", c.hidden_size}, {"n", c.intermediate_size},
                                   {"dtype", c10::toString(compute)}, {"tflops_per_s", gemm}}},
                         {"gemm_ratio", tflops / gemm}};
        if (eager_step > 0)
            j["eager"] = {{"step_s", eager_step}, {"samples_per_s", samples / eager_step},
                          {"peak_gib", eager->value("peak_gib", -1.0)}, {"loss", eager->value("loss", -1.0)},
                          {"note", eager->value("note", "")}, {"ratio", eager_step / step}};
        print_json_result(j);
    }
    return 0;
}

} // namespace hsring::bench
