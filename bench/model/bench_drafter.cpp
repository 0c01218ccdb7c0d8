// hsring-bench-drafter: one DFlash training step (loss + backward + AdamW) at a target preset's
// dims (default Qwen3-8B: 5 drafter layers, 512 anchors, block 16, 3072-token sequences) next to
// the same step in PyTorch eager (bench/python/drafter_eager.py), measured in the same run.
// --type eagle3: the EAGLE-3 drafter's step instead (bench_eagle3.cpp).
//
// --config FILE: the run's drafter (its [drafter] type, DFlash or EAGLE-3, through the drafter-type
// seam) on epoch 0's slots as `hsring plan` packs them, worst slot first, trained like
// TorchDrafter trains (whole-sequence micro-batches of [train]
// micro_batch_tokens, loss_sum backward, a step per [train] tokens_per_step with grad clipping,
// [drafter] inflight_slots slot buffers on the device); --json prints one result line for
// `hsring plan --measure`, with the memory of each micro-batch of the first slot by phase.
//
// --matmul fp8: the drafter layers' matmuls in FP8 ([train] matmul). --compare-matmul N: the
// same drafter trained N steps on the same learnable batches (markov_batches.hpp) with the layer
// matmuls in the compute dtype and in FP8; per-step losses and the mean loss per tenth of the run.
#include "bench_common.hpp"
#include "bench_eagle3.hpp"
#include "config_batches.hpp"
#include "gpu_memory.hpp"
#include "model/ops/kineto_trace.hpp"
#include "markov_batches.hpp"
#include "hsring/slot_plan.hpp"
#include "hsring/model_shape.hpp"
#include "model/drafter/dflash/config.hpp"
#include "model/drafter/dflash/flops.hpp"
#include "model/drafter/dflash/loss.hpp"
#include "model/drafter/registry/registry.hpp"
#include "model/ops/fused_adamw.hpp"
#include "model/ops/tensor_init.hpp"
#include "plan/workload.hpp"

#include <fmt/ranges.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

namespace {

int config_mode(const hsring::bench::Options& o) {
    using namespace hsring;
    using namespace hsring::model;
    using Clock = std::chrono::steady_clock;
    const bool json = o.flag("json");
    const at::Device dev = bench::bench_device(o.str("device"));
    const bool cuda = dev.is_cuda();
    if (cuda && !bench::have_gpu("hsring-bench-drafter")) return 77;
    const bench::ConfigBatches cb = bench::load_config_batches(o.str("config"), static_cast<std::uint64_t>(o.num("sample-tokens")));
    const Config& cfg = cb.cfg;
    const Derived& d = cb.derived;
    const auto& w = cb.plan.workload;
    const at::ScalarType compute = default_compute_dtype(dev);

    TargetHead head = load_target_head(d.target, dev, compute, cfg.run.seed);
    // The run's drafter of its [drafter] type, through the seam the worker trains it by
    // (src/worker/torch/torch_drafter.cpp: the same spec and [train] options).
    DrafterSpec spec;
    spec.type = cfg.drafter.type;
    spec.target = d.target;
    spec.num_layers = static_cast<int>(cfg.drafter.num_layers);
    spec.layer_ids = d.layer_ids;
    spec.block_size = static_cast<int>(cfg.drafter.block_size);
    spec.mask_token_id = d.mask_token_id;
    spec.draft_vocab = cfg.drafter.draft_vocab;
    spec.head = &head;
    if (spec.type == "eagle3" && spec.draft_vocab > 0 && spec.draft_vocab < spec.target.vocab_size) {
        // The draft vocabulary from token counts, as the worker's from its data: here epoch 0's slots'.
        spec.token_counts.assign(static_cast<std::size_t>(spec.target.vocab_size), 0);
        for (std::size_t s = 0; s < w.slots.size(); ++s)
            for (const std::int32_t t : cb.slot(s).tokens) ++spec.token_counts[static_cast<std::size_t>(t)];
    }
    const std::unique_ptr<TrainableDrafter> drafter = make_drafter(spec, cfg.run.seed, dev);
    drafter->module().train();
    torch::optim::AdamWOptions ao(cfg.train.lr);
    ao.betas({cfg.train.beta1, cfg.train.beta2}).eps(cfg.train.eps).weight_decay(cfg.train.weight_decay);
    torch::optim::AdamW adam(drafter->module().parameters(), ao);
    FusedAdamW fused_adam(adam);
    DrafterTrainOptions opt;
    opt.num_anchors = static_cast<int>(cfg.train.num_anchors);
    opt.gamma = cfg.train.loss_decay_gamma;
    opt.chunk = static_cast<int>(cfg.train.loss_chunk);
    opt.ttt_steps = static_cast<int>(cfg.drafter.ttt_steps);
    opt.ttt_decay = cfg.train.ttt_decay;
    opt.recompute_layers = cfg.train.recompute == Recompute::Layers;
    opt.fp8_matmul = cfg.train.matmul == Matmul::FP8;
    Fp8LmHead fp8_head;
    if (cfg.train.lm_head == Matmul::FP8) {
        fp8_head = fp8_lm_head(head.lm_head);
        opt.fp8_lm_head = &fp8_head;
    }
    // The worker's slot buffers: [L, slot_tokens, H] each; the first holds random hidden states.
    std::vector<at::Tensor> buffers;
    for (std::uint32_t i = 0; i < cfg.drafter.inflight_slots; ++i)
        buffers.push_back(at::empty({static_cast<std::int64_t>(d.layer_ids.size()), static_cast<std::int64_t>(cfg.ring.slot_tokens),
                                     d.target.hidden_size},
                                    at::TensorOptions().device(dev).dtype(bench::torch_dtype(cfg.ring.dtype))));
    buffers[0].normal_();

    // Worst slot first (its memory is what the plan predicts), then epoch 0 in order.
    std::vector<std::size_t> order{cb.plan.worst_slot};
    for (std::size_t s = 0; s < w.slots.size(); ++s)
        if (s != cb.plan.worst_slot) order.push_back(s);

    std::uint64_t overall_peak = 0, peak_reserved = 0;
    auto take_peak = [&] {  // the peak since the last reset, then reset
        const auto m = bench::memory_stats(cuda);
        overall_peak = std::max(overall_peak, m.peak_allocated);
        peak_reserved = std::max(peak_reserved, m.peak_reserved);
        bench::reset_peak_memory(cuda);
        return m.peak_allocated;
    };
    auto sync = [&] {
        if (cuda) torch::cuda::synchronize();
    };
    bench::reset_peak_memory(cuda);
    nlohmann::json phases = nlohmann::json::array();
    std::vector<std::size_t> trained;
    std::uint64_t mbs_in_step = 0, max_mbs = 0, slot_count = 0;
    double step_weight = 0;
    // A step of several micro-batches holds fp32 gradients while the later ones run forward; the
    // plan counts them for every micro-batch, so they exist before the worst slot's too.
    const bool grads_in_forward = w.micro_batches_per_step > 1;

    // Trains one slot; returns {tokens, samples}. `record`: the memory of each micro-batch by phase.
    auto train_slot = [&](std::size_t s, bool record) {
        const bench::SlotData data = cb.slot(s);
        const auto T = static_cast<std::int64_t>(data.tokens.size());
        at::Tensor tokens = at::from_blob(const_cast<std::int32_t*>(data.tokens.data()), {T}, at::kInt).to(dev, at::kLong);
        at::Tensor mask_host = at::from_blob(const_cast<std::uint8_t*>(data.loss_mask.data()), {T}, at::kByte).to(at::kFloat);
        at::Tensor mask = mask_host.to(dev);
        at::Tensor hidden = buffers[0].narrow(1, 0, T);
        std::vector<std::int64_t> cu{0};
        for (auto l : data.lengths) cu.push_back(cu.back() + static_cast<std::int64_t>(l));
        const auto split = hsring::split_micro_batches(data.lengths, cfg.train.micro_batch_tokens);
        for (std::size_t k = 0; k < split.size(); ++k) {
            const auto [first, last] = split[k];
            const std::int64_t begin = cu[first], len = cu[last] - cu[first];
            std::vector<std::int64_t> sub;
            for (std::size_t i = first; i <= last; ++i) sub.push_back(cu[i] - begin);
            DrafterBatch batch{hidden.narrow(1, begin, len), tokens.narrow(0, begin, len), mask.narrow(0, begin, len), sub,
                               mask_host.narrow(0, begin, len)};
            at::Generator gen = cpu_generator(cfg.run.seed * 1000003 + s * 1009 + k);
            sync();
            const auto before = bench::memory_stats(cuda).allocated;
            if (record) take_peak();
            DrafterLoss loss = drafter->loss(head, batch, opt, gen);
            sync();
            const auto fwd_peak = record ? take_peak() : 0;
            const auto saved = bench::memory_stats(cuda).allocated;
            if (loss.units > 0) loss.loss_sum.backward();
            step_weight += loss.weight_sum.item<double>();
            sync();
            if (record)
                phases.push_back({{"slot", s}, {"micro_batch", k}, {"tokens", len}, {"samples", last - first},
                                  {"blocks", loss.units}, {"before_bytes", before}, {"forward_peak_bytes", fwd_peak},
                                  {"after_forward_bytes", saved}, {"backward_peak_bytes", take_peak()}});
            ++mbs_in_step;
        }
        trained.push_back(s);
        return std::make_pair(static_cast<std::uint64_t>(T), data.samples());
    };
    // TorchDrafter::optimizer_step: mean over the step's loss weight, clip, AdamW (fused), zero_grad.
    auto optimizer_step = [&] {
        if (step_weight > 0) fused_adam.step(step_weight, cfg.train.grad_clip);
        adam.zero_grad();
        step_weight = 0;
        max_mbs = std::max(max_mbs, mbs_in_step);
        mbs_in_step = 0;
    };
    // One rank's slots of one optimizer step ([train] tokens_per_step -> Derived::slots_per_rank,
    // as drafter_loop.cpp).
    auto step = [&](bool record) {
        std::uint64_t tokens = 0, samples = 0;
        for (std::uint32_t k = 0; k < d.slots_per_rank; ++k) {
            const auto [t, n] = train_slot(order[slot_count++ % order.size()], record && tokens == 0);
            tokens += t;
            samples += n;
        }
        optimizer_step();
        return std::make_pair(tokens, samples);
    };

    if (grads_in_forward)
        for (auto& p : drafter->module().parameters()) p.mutable_grad() = at::zeros_like(p);
    step(/*record=*/true);  // warm-up: the worst slot, kernel plans, AdamW state
    sync();
    take_peak();
    const std::uint64_t static_bytes = bench::memory_stats(cuda).allocated;
    const double seconds = o.real("seconds");
    const std::int64_t min_steps = seconds > 0 ? 1 : std::max<std::int64_t>(1, o.num("iters"));
    std::uint64_t tokens = 0, samples = 0;
    std::int64_t steps = 0;
    const auto t0 = Clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
    while (steps < min_steps || (seconds > 0 && elapsed() < seconds)) {
        const auto [t, n] = step(false);
        tokens += t;
        samples += n;
        ++steps;
        sync();
    }
    const double dt = elapsed();
    take_peak();
    const double tps = static_cast<double>(tokens) / dt, sps = static_cast<double>(samples) / dt;
    auto& out = json ? stderr : stdout;
    fmt::print(out, "drafter {} ({}): {} timed steps, {:.0f} ms/step, {:.0f} trained tok/s, {:.2f} samples/s, peak {:.2f} GiB "
                    "(after a step {:.2f} GiB)\n",
               cfg.drafter.type, cfg.file.string(), steps, dt / static_cast<double>(steps) * 1e3, tps, sps,
               double(overall_peak) / (1u << 30), double(static_bytes) / (1u << 30));
    if (json)
        bench::print_json_result({{"mode", "drafter"},
                                  {"type", cfg.drafter.type},
                                  {"config", cfg.file.string()},
                                  {"device", dev.str()},
                                  {"slots", trained},
                                  {"steps", steps},
                                  {"step_s", dt / static_cast<double>(steps)},
                                  {"tokens_per_s", tps},
                                  {"samples_per_s", sps},
                                  {"micro_batches_per_step", max_mbs},
                                  {"grads_in_forward", grads_in_forward},
                                  {"recompute", to_string(cfg.train.recompute)},
                                  {"matmul", to_string(cfg.train.matmul)},
                                  {"static_allocated_bytes", static_bytes},
                                  {"peak_allocated_bytes", overall_peak},
                                  {"peak_reserved_bytes", peak_reserved},
                                  {"phases", phases}});
    return 0;
}

// --group, --key-pad, --attention-kernel.
hsring::model::BlockAttentionLayout attention_layout(const hsring::bench::Options& o) {
    hsring::model::BlockAttentionLayout a;
    a.group_blocks = o.num("group");
    a.key_pad = o.num("key-pad");
    if (a.group_blocks <= 0 || a.key_pad <= 0 || a.key_pad % 16 != 0)
        hsring::fail("--group must be > 0 and --key-pad a positive multiple of 16 (got {} and {})", a.group_blocks,
                     a.key_pad);
    a.kernel = hsring::model::parse_attention_kernel(o.str("attention-kernel"), "--attention-kernel");
    return a;
}

// "bf16" (the compute dtype) or "fp8": whether the drafter's layer matmuls run in FP8.
// --matmul / --lm-head: "bf16" (the compute dtype) or "fp8".
bool fp8_option(const hsring::bench::Options& o, const std::string& name) {
    const std::string v = o.str(name);
    if (v != "bf16" && v != "fp8") hsring::fail("--{} must be bf16 or fp8, got '{}'", name, v);
    return v == "fp8";
}

// --compare-fp8 layers|lm-head|both: what the compared run does in FP8 -> {layers, LM head}.
std::pair<bool, bool> compare_fp8_option(const std::string& v) {
    if (v != "layers" && v != "lm-head" && v != "both")
        hsring::fail("--compare-fp8 must be layers, lm-head or both, got '{}'", v);
    return {v != "lm-head", v != "layers"};
}

// "fused" (model/ops/fused_adamw.hpp, the worker's step) or "torch" (clip_grad_norm_ + AdamW::step).
bool adamw_option(const std::string& v) {
    if (v != "fused" && v != "torch") hsring::fail("--adamw must be fused or torch, got '{}'", v);
    return v == "fused";
}

// --anchors, --gamma, --chunk, the attention layout, --recompute, --matmul.
hsring::model::DFlashLossOptions loss_options(const hsring::bench::Options& o) {
    hsring::model::DFlashLossOptions opt;
    opt.num_anchors = static_cast<int>(o.num("anchors"));
    opt.gamma = o.real("gamma");
    opt.chunk = static_cast<int>(o.num("chunk"));
    opt.attention = attention_layout(o);
    if (o.str("recompute") != "none" && o.str("recompute") != "layers")
        hsring::fail("--recompute must be none or layers, got '{}'", o.str("recompute"));
    opt.recompute_layers = o.str("recompute") == "layers";
    opt.fp8_matmul = fp8_option(o, "matmul");
    fp8_option(o, "lm-head");  // checked here; the caller quantises its head (DFlashLossOptions::fp8_lm_head)
    return opt;
}

// What both result lines say of the shape trained.
nlohmann::json shape_json(const hsring::bench::Options& o, const at::Device& dev, at::ScalarType compute,
                          const hsring::model::DFlashConfig& cfg, std::int64_t samples, std::int64_t len,
                          const hsring::model::DFlashLossOptions& opt) {
    return {{"preset", o.str("preset")},
            {"device", dev.str()},
            {"compute_dtype", c10::toString(compute)},
            {"layers", cfg.num_layers},
            {"samples", samples},
            {"seq_len", len},
            {"anchors", opt.num_anchors},
            {"block", cfg.block_size},
            {"recompute", o.str("recompute")}};
}

// Mean of each tenth of `v` (each value alone when there are fewer than 10).
std::vector<double> tenths(const std::vector<double>& v) {
    const std::size_t n = v.size(), parts = std::min<std::size_t>(10, n);
    std::vector<double> out;
    for (std::size_t p = 0; p < parts; ++p) {
        const std::size_t a = p * n / parts, b = (p + 1) * n / parts;
        double sum = 0;
        for (std::size_t i = a; i < b; ++i) sum += v[i];
        out.push_back(sum / static_cast<double>(b - a));
    }
    return out;
}

// --compare-matmul N: one drafter (--seed) trained N optimizer steps twice on the same batches and
// blocks, the layer matmuls in the compute dtype ("bf16": fp32 on the CPU) and in FP8. AdamW
// (--lr, betas 0.9/0.95 as [train]) after clipping the gradient norm to 1, as a run does.
int compare_matmul_mode(const hsring::bench::Options& o) {
    using namespace hsring;
    using namespace hsring::model;
    const bool json = o.flag("json");
    auto& out = json ? stderr : stdout;
    const at::Device dev = bench::bench_device(o.str("device"));
    if (dev.is_cuda() && !bench::have_gpu("hsring-bench-drafter")) return 77;
    const std::int64_t steps = o.num("compare-matmul");
    const ModelShape shape = preset_shape(o.str("preset"));
    const std::int64_t len = o.num("seq-len"), samples = o.num("samples");
    const DFlashConfig cfg = dflash_config_for(shape, static_cast<int>(o.num("layers")), static_cast<int>(o.num("block")),
                                               -1, {});
    const at::ScalarType compute = default_compute_dtype(dev);
    const auto seed = static_cast<std::uint64_t>(o.num("seed"));
    const double lr = o.real("lr");
    TargetHead head = load_target_head(shape, dev, compute, seed);
    // The chain's token ids: the first vocab/16, at most 1024 (below any mask token), few enough
    // for the chain to be learnt in a few hundred steps.
    const std::int64_t vocab_used = o.num("compare-vocab") > 0 ? o.num("compare-vocab")
                                                                : std::clamp<std::int64_t>(shape.vocab_size / 16, 2, 1024);
    if (vocab_used < 2 || vocab_used > shape.vocab_size)
        fail("--compare-vocab must be in [2, {}] (the vocabulary), got {}", shape.vocab_size, vocab_used);
    const bench::MarkovBatches data(vocab_used, cfg.num_context_layers(), cfg.hidden_size, seed, dev, compute);
    const DFlashLossOptions opt = loss_options(o);  // --matmul / --lm-head are ignored: both runs are set below
    const auto [fp8_layers, fp8_head] = compare_fp8_option(o.str("compare-fp8"));
    const Fp8LmHead head_fp8 = fp8_head ? fp8_lm_head(head.lm_head) : Fp8LmHead{};

    // {loss per step, seconds per step}; fp8: the run with what --compare-fp8 names in FP8
    auto train = [&](bool fp8) {
        DFlashDrafter drafter(cfg, seed, dev);
        drafter->train();
        torch::optim::AdamW adam(drafter->parameters(),
                                 torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).weight_decay(0.0));
        DFlashLossOptions run_opt = opt;
        run_opt.fp8_matmul = fp8 && fp8_layers;
        run_opt.fp8_lm_head = fp8 && fp8_head ? &head_fp8 : nullptr;
        std::vector<double> losses;
        if (dev.is_cuda()) torch::cuda::synchronize();
        const auto t0 = std::chrono::steady_clock::now();
        for (std::int64_t i = 0; i < steps; ++i) {
            const DFlashBatch batch = data.batch(static_cast<std::uint64_t>(i), samples, len);
            at::Generator gen = cpu_generator(seed * 7919 + static_cast<std::uint64_t>(i));
            DFlashLossResult r = dflash_loss(drafter, head, batch, run_opt, gen);
            adam.zero_grad();
            if (r.num_blocks > 0) r.loss.backward();
            if (r.num_blocks > 0) FusedAdamW(adam).step(1.0, 1.0);
            losses.push_back(r.loss.item<double>());
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return std::make_pair(losses, s / static_cast<double>(steps));
    };
    const auto [base, base_s] = train(false);
    const auto [fp8, fp8_s] = train(true);

    fmt::print(out, "step  bf16 loss  fp8 loss  (bf16 = {} compute)\n", c10::toString(compute));
    for (std::int64_t i = 0; i < steps; ++i)
        fmt::print(out, "{:4d}  {:9.5f}  {:8.5f}\n", i, base[static_cast<std::size_t>(i)], fp8[static_cast<std::size_t>(i)]);
    const std::vector<double> base_t = tenths(base), fp8_t = tenths(fp8);
    double max_rel = 0;
    std::size_t worst = 0;
    for (std::size_t p = 0; p < base_t.size(); ++p) {
        const double rel = std::abs(fp8_t[p] - base_t[p]) / std::abs(base_t[p]);
        if (rel < max_rel) continue;
        max_rel = rel;
        worst = p;
    }
    fmt::print(out, "mean loss per tenth of {} steps:\n  bf16 {:.4f}\n  fp8  {:.4f}\n", steps, fmt::join(base_t, " "),
               fmt::join(fp8_t, " "));
    double max_step_rel = 0;  // the largest relative difference of one step's losses
    for (std::size_t i = 0; i < base.size(); ++i)
        max_step_rel = std::max(max_step_rel, std::abs(fp8[i] - base[i]) / std::abs(base[i]));
    fmt::print(out, "compare-matmul {} x{} layers, {} samples x {} tokens, lr {}, fp8 {}: max relative difference of the "
                    "tenths' means {:.4f} (tenth {}), of one step's losses {:.4f}; {:.1f} ms/step bf16, {:.1f} ms/step "
                    "fp8 (each step synchronised)\n",
               o.str("preset"), cfg.num_layers, samples, len, lr, o.str("compare-fp8"), max_rel, worst + 1, max_step_rel,
               base_s * 1e3, fp8_s * 1e3);
    if (json) {
        nlohmann::json j = shape_json(o, dev, compute, cfg, samples, len, opt);
        j.update({{"mode", "compare_matmul"},
                  {"lr", lr},
                  {"seed", seed},
                  {"vocab_used", vocab_used},
                  {"steps", steps},
                  {"losses", {{"bf16", base}, {"fp8", fp8}}},
                  {"tenths", {{"bf16", base_t}, {"fp8", fp8_t}}},
                  {"max_rel_diff", max_rel},
                  {"max_rel_diff_tenth", worst + 1},
                  {"max_step_rel_diff", max_step_rel},
                  {"compare_fp8", o.str("compare-fp8")},
                  {"step_s", {{"bf16", base_s}, {"fp8", fp8_s}}}});
        bench::print_json_result(j);
    }
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    using namespace hsring;
    using namespace hsring::model;
    try {
        bench::Options o(argc, argv,
                         {{"preset", "qwen3-8b"}, {"layers", "5"}, {"seq-len", "3072"}, {"samples", "2"},
                          {"anchors", "512"}, {"block", "16"}, {"gamma", "7"}, {"chunk", "4096"},
                          {"group", std::to_string(kAttentionGroupBlocks)}, {"key-pad", std::to_string(kAttentionKeyPad)},
                          {"attention-kernel", "auto"}, {"trace", ""},
                          {"iters", "5"}, {"warmup", "2"}, {"no-eager", "false"}, {"phases", "false"},
                          {"python", bench::default_python()}, {"script", bench::default_script("drafter_eager.py")},
                          {"seed", "1"}, {"device", "cuda"}, {"config", ""}, {"json", "false"}, {"seconds", "0"},
                          {"sample-tokens", "0"}, {"recompute", "none"}, {"matmul", "bf16"}, {"lr", "1e-4"},
                          {"compare-matmul", "0"}, {"compare-vocab", "0"}, {"compare-fp8", "layers"}, {"lm-head", "bf16"}, {"adamw", "fused"}, {"workload", ""},
                          {"type", "dflash"}, {"ttt-steps", "7"}, {"draft-vocab", "32000"}});
        if (o.help()) {
            o.print_help("hsring-bench-drafter",
                         "DFlash (--type eagle3: EAGLE-3) training step time vs PyTorch eager (GPU; --device cpu: a smoke run).\n"
                         "Prints the step's useful matmul FLOPs (src/model/drafter/dflash/flops.hpp; attention computed over\n"
                         "padded or masked keys apart, not counted), the TFLOP/s reached and the\n"
                         "ratio to a GEMM [block rows x hidden] x [hidden x intermediate] timed in the same run.\n"
                         "--recompute layers: activation checkpointing per drafter layer ([train] recompute).\n"
                         "--group N --key-pad N --attention-kernel auto|efficient|cudnn: how the block attention\n"
                         "is cut into SDPA calls and which kernel runs them (src/model/ops/attention.hpp).\n"
                         "--trace FILE: a Kineto (Chrome) trace of 2 more steps; bench/gpu/trace_summary.py sums it.\n"
                         "--matmul fp8: the drafter layers' matmuls in FP8 ([train] matmul; bf16 = the compute dtype).\n"
                         "--lm-head fp8: the LM head's two products in the loss in FP8 ([train] lm_head).\n"
                         "--adamw fused|torch: the step's clip + AdamW as the worker runs it (one fused pass) or as\n"
                         "clip_grad_norm_ + torch::optim::AdamW::step (its former step).\n"
                         "--compare-matmul N: train N steps twice from --seed on the same learnable batches, bf16 and\n"
                         "fp8 layer matmuls (AdamW --lr, grad clip 1): per-step losses, the mean loss per tenth of the\n"
                         "run and the largest relative difference of those means (no timing run, no eager); the\n"
                         "--compare-fp8 layers|lm-head|both: what the second run does in FP8 (default layers);\n"
                         "batches are Markov chains over --compare-vocab token ids (0: vocab/16, at most 1024).\n"
                         "--json: one result line; --config FILE: the run's drafter of its [drafter] type on its slots, worst first (no\n"
                         "eager); --seconds N: time N seconds of steps instead of --iters steps (--config);\n"
                         "--sample-tokens N: samples of N tokens instead of [data] path (--config).\n"
                         "--workload specforge: the best published peer's trainer shape (SpecForge's DFlash\n"
                         "microbenchmark: 768-token samples, 256 anchors, block 16, batch 2; --samples 8 for its\n"
                         "batch 8); options given on the command line win.\n"
                         "--type eagle3: the EAGLE-3 drafter's step (fused layers from eagle3_layer_ids, one midlayer,\n"
                         "--ttt-steps training-time-test steps, decay 0.8, a --draft-vocab vocabulary from the batch's token\n"
                         "counts; fused AdamW dividing by the loss weight, clip 1) vs bench/python/eagle3_eager.py (SpecForge's\n"
                         "eager EAGLE-3 step); its defaults are SpecForge's EAGLE-3 trainer's: --seq-len 2048 (max_length),\n"
                         "--samples 1 (batch size per GPU); the command line wins. DFlash-only: --layers --anchors --block\n"
                         "--gamma --chunk --group --key-pad --attention-kernel --matmul --lm-head --recompute --adamw --phases\n"
                         "--compare-*.");
            return 0;
        }
        // A run's drafter, of its config's [drafter] type.
        if (!o.str("config").empty()) return config_mode(o);
        if (o.str("type") == "eagle3") {
            o.preset("seq-len", "2048");
            o.preset("samples", "1");
            o.preset("script", bench::default_script("eagle3_eager.py"));
            return bench::eagle3_mode(o);
        }
        if (o.str("type") != "dflash") fail("--type must be dflash or eagle3, got '{}'", o.str("type"));
        if (o.str("workload") == "specforge") {
            o.preset("seq-len", "768");
            o.preset("anchors", "256");
            o.preset("block", "16");
            o.preset("samples", "2");
        } else if (!o.str("workload").empty()) {
            fail("--workload '{}': known workloads are specforge", o.str("workload"));
        }
        if (o.num("compare-matmul") < 0) fail("--compare-matmul must be >= 0, got {}", o.num("compare-matmul"));
        if (o.num("compare-matmul") > 0) return compare_matmul_mode(o);
        const bool json = o.flag("json");
        auto& out = json ? stderr : stdout;  // --json: stdout holds the result line only
        const at::Device dev = bench::bench_device(o.str("device"));
        if (dev.is_cuda() && !bench::have_gpu("hsring-bench-drafter")) return 77;
        if (!dev.is_cuda())
            fmt::print(out, "hsring-bench-drafter: CPU smoke run (checks the benchmark, measures nothing useful)\n");
        const ModelShape shape = preset_shape(o.str("preset"));
        const std::int64_t len = o.num("seq-len"), samples = o.num("samples"), total = len * samples;
        const int warmup = static_cast<int>(o.num("warmup")), iters = static_cast<int>(o.num("iters"));
        DFlashConfig cfg = dflash_config_for(shape, static_cast<int>(o.num("layers")), static_cast<int>(o.num("block")),
                                             -1, {});
        const at::ScalarType compute = default_compute_dtype(dev);

        std::optional<nlohmann::json> eager;
        if (!o.flag("no-eager")) {
            eager = bench::run_eager(
                o.str("python"), o.str("script"),
                fmt::format("--preset {} --layers {} --seq-len {} --samples {} --anchors {} --block {} --gamma {} "
                            "--iters {} --warmup {} --mask-token {} --device {}",
                            o.str("preset"), o.num("layers"), len, samples, o.num("anchors"), o.num("block"),
                            o.str("gamma"), iters, warmup, cfg.mask_token_id, o.str("device")));
        }

        const auto seed = static_cast<std::uint64_t>(o.num("seed"));
        // Random inputs from seeded default generators: runs of one shape train on the same data,
        // so their losses compare (e.g. --recompute layers against none).
        at::manual_seed(seed);
        TargetHead head = load_target_head(shape, dev, compute, seed);
        DFlashDrafter drafter(cfg, seed, dev);
        torch::optim::AdamW adam(drafter->parameters(), torch::optim::AdamWOptions(o.real("lr")).weight_decay(0.0));
        // The worker's optimizer step: clip to norm 1 ([train] grad_clip's default), AdamW; fused
        // (model/ops/fused_adamw.hpp) or, --adamw torch, clip_grad_norm_ + torch::optim::AdamW::step.
        FusedAdamW fused_adam(adam);
        const bool fused = adamw_option(o.str("adamw"));
        auto optimizer_step = [&] {
            if (fused) {
                fused_adam.step(1.0, 1.0);
            } else {
                torch::nn::utils::clip_grad_norm_(drafter->parameters(), 1.0);
                adam.step();
            }
        };
        DFlashBatch batch;
        batch.hidden = at::randn({cfg.num_context_layers(), total, cfg.hidden_size},
                                 at::TensorOptions().device(dev).dtype(compute));
        batch.tokens = at::randint(shape.vocab_size, {total}, at::TensorOptions().dtype(at::kLong)).to(dev);
        batch.loss_mask = at::ones({total}, at::TensorOptions().device(dev));
        batch.loss_mask_host = batch.loss_mask.cpu();  // as the worker has it from the ring slot
        for (std::int64_t s = 0; s <= samples; ++s) batch.cu_seqlens.push_back(s * len);
        DFlashLossOptions opt = loss_options(o);
        Fp8LmHead fp8_head;  // --lm-head fp8: quantised once, as the worker does
        if (fp8_option(o, "lm-head")) {
            fp8_head = fp8_lm_head(head.lm_head);
            opt.fp8_lm_head = &fp8_head;
        }
        at::Generator gen = cpu_generator(seed);
        // One training step (dflash_loss with its sampled blocks kept for the FLOP count). The loss
        // is read where TorchDrafter::train reads the batch's sums: after the backward, before the
        // optimizer step, whose kernels then run while the host prepares the next step (as the
        // worker's next slot does).
        double loss = 0;
        auto train_step = [&] {
            adam.zero_grad();
            DFlashBlocks b = sample_dflash_blocks(batch.tokens, batch.loss_mask, batch.cu_seqlens, cfg.block_size,
                                                  cfg.mask_token_id, opt.num_anchors, opt.gamma, gen,
                                                  batch.loss_mask_host);
            DFlashLossResult r = dflash_loss_for_blocks(drafter, head, batch, b, opt);
            r.loss.backward();
            loss = r.loss.item<double>();
            optimizer_step();
            return std::make_pair(std::move(r), std::move(b));
        };
        std::int64_t blocks = 0;
        std::vector<DFlashBlocks> step_blocks;  // each step's blocks: its FLOP count
        bench::reset_peak_memory(dev.is_cuda());
        const double step = bench::seconds_per_iter(dev,
            [&] {
                auto [r, b] = train_step();
                blocks = r.num_blocks;
                step_blocks.push_back(std::move(b));
            },
            warmup, iters);
        const auto peak_bytes = bench::memory_stats(dev.is_cuda()).peak_allocated;

        // The step's matmul work (mean over the timed steps' blocks) and the GEMM rate of its main
        // shape, [block rows x H] x [H x I], in the compute dtype, measured now on the warm device.
        DFlashStepFlops flops;
        const std::size_t timed = std::min<std::size_t>(step_blocks.size(), static_cast<std::size_t>(std::max(1, iters)));
        for (std::size_t i = step_blocks.size() - timed; i < step_blocks.size(); ++i) {
            const DFlashStepFlops f = dflash_step_flops(cfg, total, step_blocks[i], opt.attention);
            flops.layers += f.layers / double(timed);
            flops.context_kv += f.context_kv / double(timed);
            flops.attention += f.attention / double(timed);
            flops.attention_padded += f.attention_padded / double(timed);
            flops.fc += f.fc / double(timed);
            flops.lm_head += f.lm_head / double(timed);
        }
        step_blocks.clear();
        const std::int64_t gemm_m = std::max<std::int64_t>(1, blocks * cfg.block_size);
        const double gemm = bench::gemm_tflops(dev, compute, gemm_m, cfg.hidden_size, cfg.intermediate_size);
        const double tflops = flops.total() / step / 1e12;

        nlohmann::json phases_ms;
        if (o.flag("phases")) {
            // Where a step's time goes: each phase timed alone, the device synchronised around it.
            auto sync = [&] {
                if (dev.is_cuda()) torch::cuda::synchronize();
            };
            auto now = [] { return std::chrono::steady_clock::now(); };
            auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
            double t_blocks = 0, t_fwd = 0, t_loss = 0, t_bwd = 0, t_adam = 0;
            for (int i = 0; i < iters; ++i) {
                adam.zero_grad();
                sync();
                auto t0 = now();
                DFlashBlocks b = sample_dflash_blocks(batch.tokens, batch.loss_mask, batch.cu_seqlens, cfg.block_size,
                                                      cfg.mask_token_id, opt.num_anchors, opt.gamma, gen,
                                                      batch.loss_mask_host);
                sync();
                auto t1 = now();
                {
                    at::NoGradGuard ng;
                    dflash_hidden(drafter, head, batch, b, opt);
                }
                sync();
                auto t2 = now();
                auto r = dflash_loss_for_blocks(drafter, head, batch, b, opt);
                sync();
                auto t3 = now();
                r.loss.backward();
                sync();
                auto t4 = now();
                optimizer_step();
                sync();
                auto t5 = now();
                t_blocks += ms(t0, t1) / iters;
                t_fwd += ms(t1, t2) / iters;
                t_loss += ms(t2, t3) / iters;
                t_bwd += ms(t3, t4) / iters;
                t_adam += ms(t4, t5) / iters;
            }
            fmt::print(out, "phases (ms): sample blocks {:.1f} | drafter forward (no grad) {:.1f} | forward + chunked CE "
                            "{:.1f} | backward {:.1f} | AdamW {:.1f}\n", t_blocks, t_fwd, t_loss, t_bwd, t_adam);
            phases_ms = {{"sample_blocks", t_blocks}, {"forward_no_grad", t_fwd}, {"forward_chunked_ce", t_loss},
                         {"backward", t_bwd}, {"adamw", t_adam}};
        }
        if (!o.str("trace").empty()) {
            model::write_kineto_trace(o.str("trace"), dev.is_cuda(), 2, [&] { train_step(); });
            fmt::print(out, "trace of 2 steps: {}\n", o.str("trace"));
        }
        fmt::print(out, "drafter {} x{} layers: {} samples x {} tokens, {} blocks of {} per step, {} compute / fp32 "
                        "master, recompute {}, matmul {}, LM head {}, attention groups of {} blocks, keys padded to {}, kernel {}: "
                        "{:.1f} ms/step, {:.2f} samples/s, loss {:.3f}, peak {:.2f} GiB\n",
                   o.str("preset"), cfg.num_layers, samples, len, blocks, cfg.block_size, c10::toString(compute),
                   o.str("recompute"), o.str("matmul"), o.str("lm-head"), opt.attention.group_blocks, opt.attention.key_pad,
                   to_string(opt.attention.kernel), step * 1e3, samples / step, loss, double(peak_bytes) / (1u << 30));
        fmt::print(out, "matmul work: {:.2f} TFLOP per step (layers {:.2f}, context k/v {:.2f}, attention {:.2f}, fc {:.2f}, "
                        "LM head {:.2f}) -> {:.1f} TFLOP/s; GEMM {}x{}x{} {} {:.1f} TFLOP/s; ratio {:.2f}\n",
                   flops.total() / 1e12, flops.layers / 1e12, flops.context_kv / 1e12, flops.attention / 1e12,
                   flops.fc / 1e12, flops.lm_head / 1e12, tflops, gemm_m, cfg.hidden_size, cfg.intermediate_size,
                   c10::toString(compute), gemm, tflops / gemm);
        // Not useful work, so not in the TFLOP/s above: attention over keys no row sees.
        fmt::print(out, "padded attention: {:.2f} TFLOP per step more computed over keys no row sees (group context "
                        "and blocks beyond each row's mask, key padding), not counted -> {:.1f} TFLOP/s computed\n",
                   flops.attention_padded / 1e12, flops.computed() / step / 1e12);
        const double eager_step = eager ? eager->value("step_s", -1.0) : -1.0;
        bench::print_eager_ratio(out, samples, step, eager);
        if (json) {
            nlohmann::json j = shape_json(o, dev, compute, cfg, samples, len, opt);
            j.update({{"mode", "drafter"},
                      {"matmul", o.str("matmul")},
                      {"lm_head", o.str("lm-head")},
                      {"adamw", o.str("adamw")},
                      {"attention", {{"group_blocks", opt.attention.group_blocks},
                                     {"key_pad", opt.attention.key_pad},
                                     {"kernel", to_string(opt.attention.kernel)}}},
                      {"blocks", blocks},
                      {"iters", iters},
                      {"step_s", step},
                      {"samples_per_s", samples / step},
                      {"loss", loss},
                      {"peak_allocated_bytes", peak_bytes},
                      {"flops", {{"layers", flops.layers}, {"context_kv", flops.context_kv},
                                 {"attention", flops.attention}, {"fc", flops.fc}, {"lm_head", flops.lm_head},
                                 {"total", flops.total()}, {"attention_padded", flops.attention_padded},
                                 {"computed", flops.computed()}}},
                      {"tflops_per_s", tflops},
                      {"gemm", {{"m", gemm_m}, {"k", cfg.hidden_size}, {"n", cfg.intermediate_size},
                                {"dtype", c10::toString(compute)}, {"tflops_per_s", gemm}}},
                      {"gemm_ratio", tflops / gemm},
                      {"phases_ms", phases_ms}});
            if (eager_step > 0)
                j["eager"] = {{"step_s", eager_step}, {"samples_per_s", samples / eager_step},
                              {"peak_gib", eager->value("peak_gib", -1.0)}, {"note", eager->value("note", "")},
                              {"ratio", eager_step / step}};
            bench::print_json_result(j);
        }
        return 0;
    } catch (const std::exception& e) {
        fmt::print(stderr, "hsring-bench-drafter: {}\n", e.what());
        return 1;
    }
}
