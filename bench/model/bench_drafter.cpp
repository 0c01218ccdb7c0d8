// hsring-bench-drafter: one DFlash training step (loss + backward + AdamW) at a target preset's
// dims (default Qwen3-8B: 5 drafter layers, 512 anchors, block 16, 3072-token sequences) next to
// the same step in PyTorch eager (bench/python/drafter_eager.py), measured in the same run.
#include "bench_common.hpp"
#include "gpu_memory.hpp"
#include "hsring/model_shape.hpp"
#include "model/dflash_loss.hpp"
#include "model/tensor_init.hpp"

#include <torch/optim/adamw.h>

int main(int argc, char** argv) {
    using namespace hsring;
    using namespace hsring::model;
    try {
        bench::Options o(argc, argv,
                         {{"preset", "qwen3-8b"}, {"layers", "5"}, {"seq-len", "3072"}, {"samples", "2"},
                          {"anchors", "512"}, {"block", "16"}, {"gamma", "7"}, {"chunk", "4096"}, {"group", "256"},
                          {"iters", "5"}, {"warmup", "2"}, {"no-eager", "false"}, {"phases", "false"},
                          {"python", bench::default_python()}, {"script", bench::default_script("drafter_eager.py")},
                          {"seed", "1"}, {"device", "cuda"}});
        if (o.help()) {
            o.print_help("hsring-bench-drafter", "DFlash training step time vs PyTorch eager (GPU only).");
            return 0;
        }
        const at::Device dev = bench::bench_device(o.str("device"));
        if (dev.is_cuda() && !bench::have_gpu("hsring-bench-drafter")) return 77;
        if (!dev.is_cuda()) fmt::print("hsring-bench-drafter: CPU smoke run (checks the benchmark, measures nothing useful)\n");
        const ModelShape shape = preset_shape(o.str("preset"));
        const std::int64_t len = o.num("seq-len"), samples = o.num("samples"), total = len * samples;
        const int warmup = static_cast<int>(o.num("warmup")), iters = static_cast<int>(o.num("iters"));
        DFlashConfig cfg = dflash_config_for(shape, static_cast<int>(o.num("layers")), static_cast<int>(o.num("block")),
                                             -1, {});

        double eager_step = -1;
        std::string eager_note;
        if (!o.flag("no-eager")) {
            auto r = bench::run_eager(
                o.str("python"), o.str("script"),
                fmt::format("--preset {} --layers {} --seq-len {} --samples {} --anchors {} --block {} --gamma {} "
                            "--iters {} --warmup {} --mask-token {} --device {}",
                            o.str("preset"), o.num("layers"), len, samples, o.num("anchors"), o.num("block"),
                            o.str("gamma"), iters, warmup, cfg.mask_token_id, o.str("device")));
            if (r) {
                eager_step = (*r)["step_s"].get<double>();
                eager_note = r->value("note", "");
            }
        }

        const auto seed = static_cast<std::uint64_t>(o.num("seed"));
        TargetHead head = load_target_head(shape, dev, default_compute_dtype(dev), seed);
        DFlashDrafter drafter(cfg, seed, dev);
        torch::optim::AdamW adam(drafter->parameters(), torch::optim::AdamWOptions(1e-4).weight_decay(0.0));
        DFlashBatch batch;
        batch.hidden = at::randn({cfg.num_context_layers(), total, cfg.hidden_size},
                                 at::TensorOptions().device(dev).dtype(default_compute_dtype(dev)));
        batch.tokens = at::randint(shape.vocab_size, {total}, at::TensorOptions().dtype(at::kLong)).to(dev);
        batch.loss_mask = at::ones({total}, at::TensorOptions().device(dev));
        for (std::int64_t s = 0; s <= samples; ++s) batch.cu_seqlens.push_back(s * len);
        DFlashLossOptions opt;
        opt.num_anchors = static_cast<int>(o.num("anchors"));
        opt.gamma = o.real("gamma");
        opt.chunk = static_cast<int>(o.num("chunk"));
        opt.attention_group_blocks = static_cast<int>(o.num("group"));
        at::Generator gen = cpu_generator(seed);
        double loss = 0;
        std::int64_t blocks = 0;
        bench::reset_peak_memory(dev.is_cuda());
        const double step = bench::seconds_per_iter(dev,
            [&] {
                adam.zero_grad();
                auto r = dflash_loss(drafter, head, batch, opt, gen);
                r.loss.backward();
                adam.step();
                loss = r.loss.item<double>();
                blocks = r.num_blocks;
            },
            warmup, iters);
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
                                                      cfg.mask_token_id, opt.num_anchors, opt.gamma, gen);
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
                adam.step();
                sync();
                auto t5 = now();
                t_blocks += ms(t0, t1) / iters;
                t_fwd += ms(t1, t2) / iters;
                t_loss += ms(t2, t3) / iters;
                t_bwd += ms(t3, t4) / iters;
                t_adam += ms(t4, t5) / iters;
            }
            fmt::print("phases (ms): sample blocks {:.1f} | drafter forward (no grad) {:.1f} | forward + chunked CE "
                       "{:.1f} | backward {:.1f} | AdamW {:.1f}\n", t_blocks, t_fwd, t_loss, t_bwd, t_adam);
        }
        fmt::print("drafter {} x{} layers: {} samples x {} tokens, {} blocks of {} per step, {} compute / fp32 "
                   "master: {:.1f} ms/step, {:.2f} samples/s, loss {:.3f}, peak {:.1f} GiB\n",
                   o.str("preset"), cfg.num_layers, samples, len, blocks, cfg.block_size, c10::toString(default_compute_dtype(dev)), step * 1e3,
                   samples / step, loss, bench::peak_memory_gib(dev.is_cuda()));
        if (eager_step > 0)
            fmt::print("drafter: {:.2f} samples/s, eager {:.2f} samples/s ({}), ratio {:.2f}\n", samples / step,
                       samples / eager_step, eager_note, eager_step / step);
        else
            fmt::print("drafter: {:.2f} samples/s, eager n/a (not run or failed), ratio n/a\n", samples / step);
        return 0;
    } catch (const std::exception& e) {
        fmt::print(stderr, "hsring-bench-drafter: {}\n", e.what());
        return 1;
    }
}
