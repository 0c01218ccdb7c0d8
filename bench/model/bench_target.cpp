// hsring-bench-target: packed forward tokens/s of a random-initialised target preset (bf16 on
// the GPU, flash varlen attention, the DFlash layers captured) next to PyTorch eager's tokens/s
// for the same shapes, measured in the same run by bench/python/target_eager.py.
#include "bench_common.hpp"
#include "gpu_memory.hpp"
#include "hsring/model_shape.hpp"
#include "model/target.hpp"

int main(int argc, char** argv) {
    using namespace hsring;
    try {
        bench::Options o(argc, argv,
                         {{"preset", "qwen3-8b"}, {"tokens", "16384"}, {"seqs", "8"}, {"iters", "10"}, {"warmup", "3"},
                          {"draft-layers", "5"}, {"no-eager", "false"}, {"python", bench::default_python()},
                          {"script", bench::default_script("target_eager.py")}, {"seed", "1"}, {"device", "cuda"}});
        if (o.help()) {
            o.print_help("hsring-bench-target", "Packed target forward tokens/s vs PyTorch eager (GPU only).");
            return 0;
        }
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

        // Eager first, in its own process: its GPU memory is gone before ours is allocated.
        double eager = -1;
        std::string eager_attention;
        if (!o.flag("no-eager")) {
            auto r = bench::run_eager(o.str("python"), o.str("script"),
                                      fmt::format("--preset {} --lengths {} --layers {} --iters {} --warmup {} --device {}",
                                                  o.str("preset"), bench::join(lengths), bench::join(layer64), iters,
                                                  warmup, o.str("device")));
            if (r) {
                eager = (*r)["tokens_per_s"].get<double>();
                eager_attention = r->value("attention", "");
            }
        }

        auto model = model::TargetModel::load(shape, dev, dev.is_cuda() ? at::kBFloat16 : at::kFloat, static_cast<std::uint64_t>(o.num("seed")));
        at::Tensor tokens = at::randint(shape.vocab_size, {total}, at::TensorOptions().dtype(at::kLong)).to(dev);
        std::size_t captured = 0;
        bench::reset_peak_memory(dev.is_cuda());
        const double s = bench::seconds_per_iter(dev,
            [&] { model.forward(tokens, cu, layers, [&](std::size_t, const at::Tensor&) { ++captured; }); }, warmup,
            iters);
        const double tps = static_cast<double>(total) / s;
        fmt::print("target {}: {} tokens in {} sequences ({}), {}, layers {} captured: {:.1f} ms/batch, "
                   "peak {:.1f} GiB\n",
                   o.str("preset"), total, seqs, bench::join(lengths), c10::toString(model.dtype()), bench::join(layer64), s * 1e3,
                   bench::peak_memory_gib(dev.is_cuda()));
        if (eager > 0)
            fmt::print("target: {:.0f} tok/s, eager {:.0f} tok/s ({}), ratio {:.2f}\n", tps, eager, eager_attention,
                       tps / eager);
        else
            fmt::print("target: {:.0f} tok/s, eager n/a (not run or failed), ratio n/a\n", tps);
        return 0;
    } catch (const std::exception& e) {
        fmt::print(stderr, "hsring-bench-target: {}\n", e.what());
        return 1;
    }
}
