#pragma once
// TorchDrafter's state, shared by its two files: torch_drafter.cpp (staging, training and
// evaluating slots, the optimizer step) and torch_drafter_state.cpp (restore, the gang's state
// broadcast, checkpoint snapshots, export). Private to src/worker/torch.
#include "worker/torch/torch_drafter.hpp"

#include "data/splitmix.hpp"
#include "distributed/error_text.hpp"
#include "distributed/gradient_sync.hpp"
#include "hsring/dataset_options.hpp"
#include "hsring/drafter_kind.hpp"
#include "hsring/error.hpp"
#include "hsring/fault.hpp"
#include "hsring/log.hpp"
#include "hsring/slot_plan.hpp"
#include "hsring/transport.hpp"
#include "model/drafter/interface/modules.hpp"
#include "model/drafter/registry/registry.hpp"
#include "model/io/safetensors.hpp"
#include "model/ops/fused_adamw.hpp"
#include "model/ops/host_copy.hpp"
#include "model/target/target.hpp"
#include "worker/torch/snapshot_buffers.hpp"
#include "worker/torch/torch_util.hpp"

#include <ATen/CPUGeneratorImpl.h>
#ifdef HSRING_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif
#include <torch/optim/adamw.h>
#include <torch/serialize.h>

#include <chrono>
#include <cmath>
#include <deque>
#include <fstream>
#include <future>
#include <limits>
#include <thread>

namespace hsring::worker {

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

struct TorchDrafter::Impl {
    // One staged batch: its device buffer holds the slot's payload [L, slot_tokens, H].
    struct Staged {
        PackedBatch batch;
        at::Tensor hidden;     // [L, T, H] view of the buffer
        at::Tensor tokens, loss_mask;
        at::Tensor loss_mask_host;  // [T] fp32 on the host: anchor sampling reads it (no wait for the device)
        std::size_t buffer = 0;
        double copy_ms = 0;
        std::unique_ptr<transport::StagedCopy> copy;  // releases the slot when the copy completed
    };

    Context& ctx;
    at::Device device;
    at::ScalarType ring_dtype;
    model::TargetHead head;
    model::DrafterSpec spec;       // what this run's drafter is (its type, shapes, layers)
    model::Fp8LmHead lm_head_fp8;  // [train] lm_head = "fp8": head.lm_head quantised once (loss_opts points here)
    std::unique_ptr<model::TrainableDrafter> drafter;
    std::unique_ptr<torch::optim::AdamW> optimizer;  // the state (checkpoints, broadcast); stepped by:
    std::unique_ptr<model::FusedAdamW> fused_step;
    SnapshotBuffers snapshots;  // the checkpoint snapshots' host buffers (two: double buffering)
    distributed::Gang& gang;
    std::unique_ptr<distributed::GradientSync> sync;  // world > 1: gradient sums over the gang
    bool synced = false;               // the last train_one(true) summed the gradients
    model::DrafterTrainOptions loss_opts;
    std::vector<at::Tensor> buffers;   // inflight_slots device buffers
    std::vector<bool> buffer_busy;
    std::optional<std::size_t> received;  // the buffer receive() gave the slot stage() gets next
    std::deque<Staged> staged;
    double step_weight = 0;            // total loss weight accumulated in this step
    // Declared after the buffers: destroyed first, it waits for the copies still going into them.
    // Made on a thread while the model is built (registering the ring with CUDA takes seconds).
    std::future<std::unique_ptr<transport::SlotReader>> reader_ready;
    std::unique_ptr<transport::SlotReader> reader;
    transport::SlotReader& slot_reader() {
        if (!reader) reader = reader_ready.get();
        return *reader;
    }

    Impl(Context& c, distributed::Gang& gang_)
        : ctx(c), device(worker_device(c.env.cuda)), ring_dtype(scalar_type(c.cfg.ring.dtype)), gang(gang_) {
        if (!device.is_cuda()) configure_cpu_threads(c.cfg);
        const at::ScalarType compute = model::default_compute_dtype(device);
        head = model::load_target_head(c.derived.target, device, compute, c.cfg.run.seed);
        spec.type = c.cfg.drafter.type;
        spec.target = c.derived.target;
        spec.num_layers = static_cast<int>(c.cfg.drafter.num_layers);
        spec.layer_ids = c.derived.layer_ids;
        spec.block_size = static_cast<int>(c.cfg.drafter.block_size);
        spec.mask_token_id = c.derived.mask_token_id;
        spec.draft_vocab = c.cfg.drafter.draft_vocab;
        spec.head = &head;
        loss_opts.num_anchors = static_cast<int>(c.cfg.train.num_anchors);
        loss_opts.gamma = c.cfg.train.loss_decay_gamma;
        loss_opts.chunk = static_cast<int>(c.cfg.train.loss_chunk);
        loss_opts.ttt_steps = static_cast<int>(c.cfg.drafter.ttt_steps);
        loss_opts.ttt_decay = c.cfg.train.ttt_decay;
        loss_opts.recompute_layers = c.cfg.train.recompute == Recompute::Layers;
        // FP8 on the CPU is allowed: _scaled_mm emulates it there (slowly), which lets CPU runs and
        // tests exercise the same numerics as a GPU's FP8 tensor cores.
        loss_opts.fp8_matmul = c.cfg.train.matmul == Matmul::FP8;
        if (c.cfg.train.lm_head == Matmul::FP8) {
            lm_head_fp8 = model::fp8_lm_head(head.lm_head);
            loss_opts.fp8_lm_head = &lm_head_fp8;
        }
        const RingGeometry& g = c.ring.geometry();
        for (std::uint32_t i = 0; i < c.cfg.drafter.inflight_slots; ++i) {
            buffers.push_back(at::empty({std::int64_t(g.n_layers), std::int64_t(g.slot_tokens), std::int64_t(g.hidden)},
                                        at::TensorOptions().dtype(ring_dtype).device(device)));
            buffer_busy.push_back(false);
        }
        reader_ready = std::async(std::launch::async, [&ring = c.ring, opts = transport::options_for(c.cfg, device.is_cuda())] {
            return transport::make_slot_reader(ring, opts);
        });
    }

    // The loop never stages more than inflight_slots: one is free.
    std::size_t free_buffer() const {
        std::size_t b = 0;
        while (buffer_busy[b]) ++b;
        return b;
    }

    // After the model exists (restore or replica): the optimizer, and the gang's gradient sums
    // over exactly these parameter tensors.
    void make_optimizer() {
        torch::optim::AdamWOptions o(ctx.cfg.train.lr);
        o.betas({ctx.cfg.train.beta1, ctx.cfg.train.beta2}).eps(ctx.cfg.train.eps).weight_decay(ctx.cfg.train.weight_decay);
        optimizer = std::make_unique<torch::optim::AdamW>(drafter->module().parameters(), o);
        fused_step = std::make_unique<model::FusedAdamW>(*optimizer);
        if (auto* c10d = dynamic_cast<distributed::C10dGang*>(&gang))
            sync = std::make_unique<distributed::GradientSync>(*c10d, drafter->module().parameters());
    }
    // A staged batch's sequences in micro-batches of at most micro_batch_tokens (slot_plan.hpp's
    // rule, which the planner counts memory by): [first, last) sequence index pairs.
    std::vector<std::pair<std::size_t, std::size_t>> micro_batches(const Staged& s) const {
        const std::vector<std::int64_t> cu = s.batch.cu_seqlens();
        std::vector<std::uint64_t> lengths;
        for (std::size_t i = 0; i + 1 < cu.size(); ++i) lengths.push_back(static_cast<std::uint64_t>(cu[i + 1] - cu[i]));
        return split_micro_batches(lengths, ctx.cfg.train.micro_batch_tokens);
    }
    // Sequences [first, last) of a staged batch: views of its tensors, offsets from 0.
    model::DrafterBatch micro_batch(const Staged& s, std::size_t first, std::size_t last) const {
        const std::vector<std::int64_t> cu = s.batch.cu_seqlens();
        const std::int64_t begin = cu[first], len = cu[last] - cu[first];
        std::vector<std::int64_t> sub;
        for (std::size_t i = first; i <= last; ++i) sub.push_back(cu[i] - begin);
        return {s.hidden.narrow(1, begin, len), s.tokens.narrow(0, begin, len), s.loss_mask.narrow(0, begin, len), sub,
                s.loss_mask_host.narrow(0, begin, len)};
    }
    // The oldest staged batch, used once its copy completed (and its slot was released).
    Staged take_staged() {
        Staged s = std::move(staged.front());
        staged.pop_front();
        s.copy->wait(current_stream(device));  // compute queued from now on runs after the copy
        s.copy_ms = s.copy->copy_ms();
        return s;
    }
    // A fresh drafter of the run's type (EAGLE-3's draft vocabulary from the data's token counts).
    void make_fresh() {
        if (drafter_kind(spec.type).has_draft_vocab && spec.draft_vocab > 0 && spec.draft_vocab < spec.target.vocab_size &&
            spec.token_counts.empty())
            spec.token_counts = token_counts();
        drafter = model::make_drafter(spec, ctx.cfg.run.seed, device);
    }
    // How often each target token is trained on in [data] path (every token where nothing is
    // loss-masked, e.g. prompts the target answers).
    std::vector<std::int64_t> token_counts() const {
        const data::Dataset ds = data::Dataset::load(ctx.cfg.resolve(ctx.cfg.data.path),
                                                     data::dataset_options(ctx.cfg, ctx.derived));
        std::vector<std::int64_t> counts(static_cast<std::size_t>(spec.target.vocab_size), 0);
        bool any_mask = false;
        for (std::size_t i = 0; i < ds.size(); ++i) {
            const auto t = ds.tokens(i);
            const auto m = ds.loss_mask(i);
            for (std::size_t j = 0; j < t.size(); ++j)
                if (m[j]) {
                    ++counts[static_cast<std::size_t>(t[j])];
                    any_mask = true;
                }
        }
        if (!any_mask)
            for (std::size_t i = 0; i < ds.size(); ++i)
                for (std::int32_t tok : ds.tokens(i)) ++counts[static_cast<std::size_t>(tok)];
        return counts;
    }
    void describe() const {
        std::int64_t n = 0;
        for (const auto& p : drafter->module().parameters()) n += p.numel();
        const auto precision = [&](bool fp8) {
            return fp8 ? (device.is_cuda() ? "fp8" : "fp8 (emulated on the CPU)")
                       : c10::toString(model::default_compute_dtype(device));
        };
        log::info("drafter: {}, {:.1f} M trainable parameters on {}, layer matmuls in {}, LM head in {}",
                  drafter->describe(), double(n) / 1e6, device.str(), precision(loss_opts.fp8_matmul),
                  precision(loss_opts.fp8_lm_head != nullptr));
    }
};

} // namespace hsring::worker
