// hsring-bench-target: packed forward tokens/s of a random-initialised target preset (bf16 on
// the GPU, flash varlen attention, the DFlash layers captured) next to PyTorch eager's tokens/s
// for the same shapes, measured in the same run by bench/python/target_eager.py.
//
// --config FILE: the run's target, captured layers and dtype on the fullest slot of epoch 0 (as
// `hsring plan` packs it), captured layers kept referenced until the end of the forward as the
// worker keeps them for its D2H copies; --json prints one result line for `hsring plan --measure`.
#include "bench_common.hpp"
#include "config_batches.hpp"
#include "gpu_memory.hpp"
#include "hsring/model_shape.hpp"
#include "model/ops/kineto_trace.hpp"
#include "model/target/target.hpp"

namespace {

// The matmul work the packed forward of layers 0..last does, counted on active parameters: per
// token the q/k/v/o projections, the dense MLP or the router plus its top-k experts; per layer the
// score and value products over the keys each query sees (causal, within a sliding window).
double active_flops(const hsring::ModelShape& s, const std::vector<std::int64_t>& lengths, int last) {
    const double h = static_cast<double>(s.hidden_size), q = static_cast<double>(s.num_heads * s.head_dim),
                 kv = static_cast<double>(s.num_kv_heads * s.head_dim);
    double tokens = 0;
    for (auto l : lengths) tokens += static_cast<double>(l);
    double flops = 0;
    for (int i = 0; i <= last; ++i) {
        double per_token = 2 * h * (q + 2 * kv) + 2 * q * h;
        if (s.is_moe_layer(i))
            per_token += 2 * h * static_cast<double>(s.num_experts) +
                         static_cast<double>(s.num_experts_per_tok) * 6 * h * static_cast<double>(s.moe_intermediate_size);
        else
            per_token += 6 * h * static_cast<double>(s.intermediate_size);
        flops += per_token * tokens;
        const std::int64_t window = s.attention_window(i);
        for (auto l : lengths)
            for (std::int64_t p = 0; p < l; ++p)  // keys seen by the query at p: QK^T and PV, 2 flops each
                flops += 4 * q * static_cast<double>(window > 0 ? std::min(p + 1, window) : p + 1);
    }
    return flops;
}

int config_mode(const hsring::bench::Options& o) {
    using namespace hsring;
    const bool json = o.flag("json");
    const at::Device dev = bench::bench_device(o.str("device"));
    if (dev.is_cuda() && !bench::have_gpu("hsring-bench-target")) return 77;
    const bench::ConfigBatches cb = bench::load_config_batches(o.str("config"), static_cast<std::uint64_t>(o.num("sample-tokens")));
    const Config& cfg = cb.cfg;
    std::size_t fullest = 0;
    std::uint64_t most = 0;
    for (std::size_t s = 0; s < cb.plan.workload.slots.size(); ++s) {
        std::uint64_t t = 0;
        for (auto i : cb.plan.workload.slots[s]) t += cb.plan.workload.samples[i].tokens;
        if (t > most) {
            most = t;
            fullest = s;
        }
    }
    bench::SlotData data = cb.slot(fullest);
    std::vector<std::int64_t> cu{0};
    for (auto l : data.lengths) cu.push_back(cu.back() + static_cast<std::int64_t>(l));
    const auto T = static_cast<std::int64_t>(data.tokens.size());
    const at::ScalarType dtype = dev.is_cuda() ? bench::torch_dtype(cfg.target.dtype) : at::kFloat;
    const at::ScalarType ring = bench::torch_dtype(cfg.ring.dtype);
    auto model = model::TargetModel::load(cb.derived.target, dev, dtype, cfg.run.seed, cfg.target.weights == TargetWeights::FP8);
    const auto weights = bench::memory_stats(dev.is_cuda()).allocated;
    bench::reset_peak_memory(dev.is_cuda());
    std::vector<at::Tensor> kept;
    auto batch = [&] {
        at::Tensor tokens = at::from_blob(data.tokens.data(), {T}, at::kInt).to(dev, at::kLong);
        model.forward(tokens, cu, cb.derived.layer_ids, [&](std::size_t, const at::Tensor& h) {
            at::Tensor x = (h.scalar_type() == ring ? h : h.to(ring)).contiguous();
            if (dev.is_cuda()) kept.push_back(std::move(x));  // TorchTarget: alive until its D2H copy ends
        });
        kept.clear();
    };
    const auto [s, n] = bench::timed_calls(dev, batch, static_cast<int>(o.num("warmup")), static_cast<int>(o.num("iters")),
                                           o.real("seconds"));
    const bench::MemoryStats mem = bench::memory_stats(dev.is_cuda());
    const double tps = static_cast<double>(T) / s;
    auto& out = json ? stderr : stdout;
    fmt::print(out, "target {} ({}): slot {} of {} tokens in {} samples, {}: {:.1f} ms/batch, {:.0f} tok/s, peak {:.2f} GiB "
                    "(weights {:.2f} GiB)\n",
               cb.derived.target.source, cfg.file.string(), fullest, T, data.samples(), c10::toString(dtype), s * 1e3, tps,
               double(mem.peak_allocated) / (1u << 30), double(weights) / (1u << 30));
    if (json)
        bench::print_json_result({{"mode", "target"},
                                  {"config", cfg.file.string()},
                                  {"device", dev.str()},
                                  {"slot", fullest},
                                  {"tokens", T},
                                  {"sequences", data.samples()},
                                  {"batches", n},
                                  {"ms_per_batch", s * 1e3},
                                  {"tokens_per_s", tps},
                                  {"weights_allocated_bytes", weights},
                                  {"peak_allocated_bytes", mem.peak_allocated},
                                  {"peak_reserved_bytes", mem.peak_reserved}});
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    using namespace hsring;
    try {
        bench::Options o(argc, argv,
                         {{"preset", "qwen3-8b"}, {"tokens", "16384"}, {"seqs", "8"}, {"iters", "10"}, {"warmup", "3"},
                          {"draft-layers", "5"}, {"no-eager", "false"}, {"python", bench::default_python()},
                          {"script", bench::default_script("target_eager.py")}, {"seed", "1"}, {"device", "cuda"},
                          {"config", ""}, {"json", "false"}, {"seconds", "0"}, {"sample-tokens", "0"}, {"workload", ""},
                          {"weights", "bf16"}, {"trace", ""}});
        if (o.help()) {
            o.print_help("hsring-bench-target",
                         "Packed target forward tokens/s vs PyTorch eager (GPU only).\n"
                         "--config FILE: the run's target on its fullest slot (no eager); --json: one result line;\n"
                         "--seconds N: time N seconds instead of --iters; --sample-tokens N: samples of N tokens\n"
                         "instead of [data] path.\n"
                         "--workload specforge: the best published peer's capture shape (SpecForge's SGLang server on\n"
                         "~550-token prompts: 16,384 tokens in 30 sequences of 224..897 tokens, mean 546); options given on\n"
                         "the command line win.\n"
                         "--weights bf16|fp8|both: the target's linear layers ([target] weights); both: bf16 then FP8 on\n"
                         "the same tokens in this run, their tokens/s ratio and the captured hidden states' relative error.\n"
                         "--trace FILE: a Kineto (Chrome) trace of 2 more forwards (of the FP8 model with --weights both);\n"
                         "bench/gpu/trace_summary.py sums it.");
            return 0;
        }
        if (o.str("workload") == "specforge") {
            o.preset("tokens", "16384");
            o.preset("seqs", "30");
        } else if (!o.str("workload").empty()) {
            fail("--workload '{}': known workloads are specforge", o.str("workload"));
        }
        if (!o.str("config").empty()) return config_mode(o);
        const at::Device dev = bench::bench_device(o.str("device"));
        if (dev.is_cuda() && !bench::have_gpu("hsring-bench-target")) return 77;
        if (!dev.is_cuda()) fmt::print("hsring-bench-target: CPU smoke run (checks the benchmark, measures nothing useful)\n");
        const std::int64_t total = o.num("tokens"), seqs = o.num("seqs");
        if (seqs <= 0 || total < seqs) fail("--tokens {} must be at least --seqs {} > 0", total, seqs);
        // Varied lengths (weights 1..4, repeating) summing to --tokens: a realistic packed slot.
        std::vector<std::int64_t> lengths, cu{0};
        std::int64_t weight_sum = 0;
        for (std::int64_t i = 0; i < seqs; ++i) weight_sum += i % 4 + 1;
        for (std::int64_t i = 0; i < seqs; ++i) {
            const std::int64_t l = i + 1 == seqs ? total - cu.back() : std::max<std::int64_t>(1, total * (i % 4 + 1) / weight_sum);
            lengths.push_back(l);
            cu.push_back(cu.back() + l);
        }
        ModelShape shape = preset_shape(o.str("preset"));
        const std::vector<int> layers = dflash_layer_ids(static_cast<int>(shape.num_layers), static_cast<int>(o.num("draft-layers")));
        std::vector<std::int64_t> layer64(layers.begin(), layers.end());
        const int warmup = static_cast<int>(o.num("warmup")), iters = static_cast<int>(o.num("iters"));

        // Eager first, in its own process: its GPU memory is gone before ours is allocated. A MoE
        // preset runs two baselines: transformers' per-expert loop and grouped GEMMs.
        struct Baseline {
            std::string name;
            double tokens_per_s = -1;
            std::string attention;
        };
        std::vector<Baseline> baselines;
        const std::vector<std::string> moe_modes =
            shape.num_moe_layers() > 0 ? std::vector<std::string>{"eager", "grouped"} : std::vector<std::string>{""};
        for (const auto& mode : o.flag("no-eager") ? std::vector<std::string>{} : moe_modes) {
            auto r = bench::run_eager(o.str("python"), o.str("script"),
                                      fmt::format("--preset {} --lengths {} --layers {} --iters {} --warmup {} --device {}{}",
                                                  o.str("preset"), bench::join(lengths), bench::join(layer64), iters,
                                                  warmup, o.str("device"), mode.empty() ? "" : " --moe " + mode));
            Baseline b{mode.empty() ? "eager" : "eager, experts " + mode};
            if (r) {
                b.tokens_per_s = (*r)["tokens_per_s"].get<double>();
                b.attention = r->value("attention", "");
            }
            baselines.push_back(b);
        }

        const std::string weights = o.str("weights");
        if (weights != "bf16" && weights != "fp8" && weights != "both")
            fail("--weights must be bf16, fp8 or both, got '{}'", weights);
        at::Tensor tokens = at::randint(shape.vocab_size, {total}, at::TensorOptions().dtype(at::kLong)).to(dev);
        const at::ScalarType compute = dev.is_cuda() ? at::kBFloat16 : at::kFloat;
        struct Measured {
            double s = 0;
            std::vector<at::Tensor> hidden;  // the captured layers of the last forward
        };
        // One model at a time on the device: the first is freed before the second is loaded.
        auto measure = [&](bool fp8) {
            auto model = model::TargetModel::load(shape, dev, compute, static_cast<std::uint64_t>(o.num("seed")), fp8);
            Measured m;
            m.hidden.resize(layers.size());
            bench::reset_peak_memory(dev.is_cuda());
            m.s = bench::seconds_per_iter(dev,
                [&] { model.forward(tokens, cu, layers, [&](std::size_t i, const at::Tensor& h) { m.hidden[i] = h; }); },
                warmup, iters);
            fmt::print("target {} ({}): {} tokens in {} sequences ({}), {}, layers {} captured: {:.1f} ms/batch, "
                       "{:.0f} tok/s, peak {:.1f} GiB\n",
                       o.str("preset"), fp8 ? "fp8 weights" : "bf16 weights", total, seqs, bench::join(lengths),
                       c10::toString(model.dtype()), bench::join(layer64), m.s * 1e3, static_cast<double>(total) / m.s,
                       bench::peak_memory_gib(dev.is_cuda()));
            if (!o.str("trace").empty() && fp8 == (weights != "bf16")) {
                model::write_kineto_trace(o.str("trace"), dev.is_cuda(), 2, [&] {
                    model.forward(tokens, cu, layers, [&](std::size_t i, const at::Tensor& h) { m.hidden[i] = h; });
                });
                fmt::print("trace of 2 forwards: {}\n", o.str("trace"));
            }
            return m;
        };
        const Measured main = measure(weights == "fp8");
        const double s = main.s;
        const double tps = static_cast<double>(total) / s;
        if (weights == "both") {
            const Measured q = measure(true);
            fmt::print("target: fp8 weights {:.0f} tok/s vs bf16 {:.0f} tok/s in this run: ratio {:.2f}\n",
                       static_cast<double>(total) / q.s, tps, s / q.s);
            for (std::size_t i = 0; i < layers.size(); ++i) {
                const at::Tensor a = main.hidden[i].to(at::kFloat), b = q.hidden[i].to(at::kFloat);
                fmt::print("target: layer {} hidden state, fp8 vs bf16: relative error {:.4f} (L2), finite {}\n",
                           layers[i], ((b - a).norm() / a.norm()).item<double>(), at::isfinite(b).all().item<bool>());
            }
        }
        // Useful work against a plain GEMM [tokens x hidden] x [hidden x intermediate] in the same run.
        const double tflops = active_flops(shape, lengths, layers.empty() ? -1 : *std::max_element(layers.begin(), layers.end())) / s / 1e12;
        const double gemm = bench::gemm_tflops(dev, compute, total, shape.hidden_size, shape.intermediate_size);
        fmt::print("target: {:.1f} TFLOP/s on active parameters; GEMM {}x{}x{} {} {:.1f} TFLOP/s; ratio {:.2f}\n", tflops,
                   total, shape.hidden_size, shape.intermediate_size, c10::toString(compute), gemm, tflops / gemm);
        if (baselines.empty()) fmt::print("target: {:.0f} tok/s, eager not run\n", tps);
        for (const auto& b : baselines) {
            if (b.tokens_per_s > 0)
                fmt::print("target: {:.0f} tok/s, {} {:.0f} tok/s ({}), ratio {:.2f}\n", tps, b.name, b.tokens_per_s,
                           b.attention, tps / b.tokens_per_s);
            else
                fmt::print("target: {:.0f} tok/s, {} n/a (not run or failed), ratio n/a\n", tps, b.name);
        }
        return 0;
    } catch (const std::exception& e) {
        fmt::print(stderr, "hsring-bench-target: {}\n", e.what());
        return 1;
    }
}
