#include "worker/torch/torch_drafter.hpp"

#include "data/splitmix.hpp"
#include "hsring/drafter_kind.hpp"
#include "hsring/error.hpp"
#include "hsring/fault.hpp"
#include "hsring/log.hpp"
#include "hsring/slot_plan.hpp"
#include "hsring/transport.hpp"
#include "hsring/dataset_options.hpp"
#include "model/drafter/interface/modules.hpp"
#include "model/drafter/registry/registry.hpp"
#include "model/ops/fused_adamw.hpp"
#include "model/ops/host_copy.hpp"
#include "model/io/safetensors.hpp"
#include "model/target/target.hpp"
#include "distributed/error_text.hpp"
#include "distributed/gradient_sync.hpp"
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
#include <limits>
#include <deque>
#include <future>
#include <fstream>
#include <thread>

namespace hsring::worker {

namespace {
using Clock = std::chrono::steady_clock;
std::uint64_t mix64(std::uint64_t x) { return data::detail::mix64(x + data::detail::kGolden); }
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Nothing non-finite is checkpointed or exported (invariant 10, docs/architecture.md): the first tensor of
// `named` that holds a NaN or inf, checked on its device (one small read per tensor).
void require_finite(const std::vector<std::pair<std::string, at::Tensor>>& named, const std::string& what) {
    for (const auto& [name, t] : named) {
        if (!t.defined() || at::isfinite(t).all().item<bool>()) continue;
        throw NonFiniteState(fmt::format("{}: {} holds non-finite values (NaN or inf); nothing is written. The last "
                                         "good checkpoint is kept", what, name));
    }
}

// A checkpoint of the drafter as of one step: drafter/ (the export format, fp32) and
// optimizer.safetensors (AdamW's moments and step per parameter name), written from the host
// copies only (any thread). Checkpoints of older hsring have optimizer.pt (torch::save) instead.
constexpr const char* kOptimizerFile = "optimizer.safetensors";

class TorchSnapshot final : public StateSnapshot {
public:
    TorchSnapshot(std::shared_ptr<HostState> state, model::DrafterExporter exporter, torch::optim::AdamWOptions options)
        : s_(std::move(state)), exporter_(std::move(exporter)), options_(std::move(options)) {}
    void write(const std::filesystem::path& dir) override {
        std::map<std::string, at::Tensor> named;
        for (std::size_t i = 0; i < s_->params.size(); ++i) named[s_->names[i]] = s_->params[i];
        exporter_(dir / "drafter", named, at::kFloat);
        // AdamW's state by parameter name, as safetensors: a restart maps it and copies it to the
        // device in a second or two (torch::save's archive took ~10 s to load back at Qwen3-8B dims).
        model::TensorMap moments;
        for (std::size_t i = 0; i < s_->params.size(); ++i) {
            if (!s_->exp_avg[i].defined()) continue;
            const std::string& n = s_->names[i];
            moments["exp_avg." + n] = s_->exp_avg[i];
            moments["exp_avg_sq." + n] = s_->exp_avg_sq[i];
            moments["step." + n] = at::full({1}, s_->steps[i], at::TensorOptions().dtype(at::kLong));
        }
        model::save_safetensors(dir / kOptimizerFile, moments, {{"format", "hsring-adamw"}});
    }
    std::uint64_t bytes() const override {
        std::uint64_t n = 0;
        for (const auto* v : {&s_->params, &s_->exp_avg, &s_->exp_avg_sq})
            for (const auto& t : *v)
                if (t.defined()) n += t.nbytes();
        return n;
    }

private:
    std::shared_ptr<HostState> s_;
    model::DrafterExporter exporter_;
    torch::optim::AdamWOptions options_;
};
} // namespace

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
    // A staged batch is used after its copy completed (and its slot was released).
    void wait_for_copy(Staged& s) {
        s.copy->wait(current_stream(device));  // compute queued from now on runs after the copy
        s.copy_ms = s.copy->copy_ms();
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

TorchDrafter::TorchDrafter(Context& ctx, distributed::Gang& gang) : impl_(std::make_unique<Impl>(ctx, gang)) {}
TorchDrafter::~TorchDrafter() = default;

void TorchDrafter::restore(const std::filesystem::path* checkpoint) {
    Impl& m = *impl_;
    if (checkpoint) {
        m.drafter = model::load_drafter(*checkpoint / "drafter", m.device);
        if (const std::string why = m.drafter->mismatch(m.spec); !why.empty())
            fail("checkpoint {}: the drafter cannot continue this run: {}", checkpoint->string(), why);
        m.make_optimizer();
        if (std::filesystem::exists(*checkpoint / kOptimizerFile)) {
            // Mapped, then copied to the parameters' device tensor by tensor.
            const model::SafetensorsFile f = model::read_safetensors(*checkpoint / kOptimizerFile);
            for (const auto& p : m.drafter->module().named_parameters()) {
                const auto a = f.tensors.find("exp_avg." + p.key());
                if (a == f.tensors.end()) continue;  // no step trained it yet
                const auto b = f.tensors.find("exp_avg_sq." + p.key()), n = f.tensors.find("step." + p.key());
                if (b == f.tensors.end() || n == f.tensors.end() || a->second.sizes() != p.value().sizes())
                    fail("{}: the AdamW state of {} is incomplete or of another shape: a damaged checkpoint",
                         (*checkpoint / kOptimizerFile).string(), p.key());
                auto st = std::make_unique<torch::optim::AdamWParamState>();
                st->step(n->second.item<std::int64_t>());
                st->exp_avg(a->second.to(p.value().device(), /*non_blocking=*/false, /*copy=*/true));
                st->exp_avg_sq(b->second.to(p.value().device(), false, true));
                m.optimizer->state()[p.value().unsafeGetTensorImpl()] = std::move(st);
            }
        } else {
            torch::load(*m.optimizer, (*checkpoint / "optimizer.pt").string());
            // The archive's tensors come back where they were saved (host memory since snapshots):
            // the state lives with its parameter.
            for (const auto& p : m.drafter->module().parameters()) {
                auto it = m.optimizer->state().find(p.unsafeGetTensorImpl());
                if (it == m.optimizer->state().end()) continue;
                auto& st = static_cast<torch::optim::AdamWParamState&>(*it->second);
                st.exp_avg(st.exp_avg().to(p.device()));
                st.exp_avg_sq(st.exp_avg_sq().to(p.device()));
                if (st.max_exp_avg_sq().defined()) st.max_exp_avg_sq(st.max_exp_avg_sq().to(p.device()));
            }
        }
    } else if (!m.ctx.cfg.drafter.init.empty()) {
        m.drafter = model::load_drafter(m.ctx.cfg.resolve(m.ctx.cfg.drafter.init), m.device);
        if (const std::string why = m.drafter->mismatch(m.spec); !why.empty())
            fail("[drafter] init {}: it does not fit this run: {}", m.ctx.cfg.drafter.init, why);
        m.make_optimizer();
    } else {
        m.make_fresh();
        m.make_optimizer();
    }
    m.drafter->module().train();
    if (checkpoint) {
        // A checkpoint with NaN weights (written by an older hsring) is never trained on.
        std::vector<std::pair<std::string, at::Tensor>> named;
        for (const auto& p : m.drafter->module().named_parameters()) named.emplace_back(p.key(), p.value());
        require_finite(named, fmt::format("the checkpoint {}", checkpoint->string()));
    }
    m.describe();
    if (m.device.is_cuda() && m.ctx.cfg.train.checkpoint_background) {
        // Master only (restore): pinned host buffers for the weights and both AdamW moments.
        // (allocated after the first step: SnapshotBuffers::allocate)
        std::vector<std::vector<std::int64_t>> shapes;
        for (const auto& p : m.drafter->module().parameters()) shapes.push_back(p.sizes().vec());
        m.snapshots.plan_pinned(std::move(shapes));
    }
    m.slot_reader();  // registered meanwhile; a failure is the start's (a user error), not a crash later
}

void TorchDrafter::prepare_replica() {
    Impl& m = *impl_;
    m.slot_reader();
    // Any weights do: the master's replace them (broadcast_state).
    m.make_fresh();
    m.make_optimizer();
    m.drafter->module().train();
    m.describe();
}

void TorchDrafter::broadcast_state() {
    Impl& m = *impl_;
    if (!m.sync) return;
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> params = m.drafter->module().parameters();
    // AdamW's state exists once the master made a step (a restored checkpoint): the others make
    // room for it, then every state tensor is sent like the weights.
    double has_state = m.optimizer->state().empty() ? 0.0 : 1.0;
    m.gang.allreduce_max({&has_state, 1});
    std::vector<at::Tensor> tensors = params;
    if (has_state > 0) {
        for (auto& p : params) {
            auto& slot = m.optimizer->state()[p.unsafeGetTensorImpl()];
            if (!slot) {
                auto st = std::make_unique<torch::optim::AdamWParamState>();
                st->step(0);
                st->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
                st->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
                slot = std::move(st);
            }
            auto& st = static_cast<torch::optim::AdamWParamState&>(*slot);
            tensors.push_back(st.exp_avg());
            tensors.push_back(st.exp_avg_sq());
        }
        std::vector<double> steps;
        for (auto& p : params)
            steps.push_back(double(static_cast<torch::optim::AdamWParamState&>(*m.optimizer->state()[p.unsafeGetTensorImpl()]).step()));
        if (!m.gang.place().is_master()) std::fill(steps.begin(), steps.end(), 0.0);
        m.gang.allreduce_sum(steps);
        for (std::size_t i = 0; i < params.size(); ++i)
            static_cast<torch::optim::AdamWParamState&>(*m.optimizer->state()[params[i].unsafeGetTensorImpl()])
                .step(static_cast<std::int64_t>(steps[i]));
    }
    m.sync->broadcast(tensors);
}

void TorchDrafter::stage(ReadSlot slot, PackedBatch batch, std::vector<std::uint8_t> keep) {
    Impl& m = *impl_;
    // Samples re-issued meanwhile stay in the batch as context but train nothing.
    for (std::size_t i = 0, off = 0; i < batch.positions.size(); off += batch.lengths[i], ++i)
        if (!keep[i]) std::fill_n(batch.loss_mask.begin() + static_cast<std::ptrdiff_t>(off), batch.lengths[i], 0);
    const std::size_t b = m.received ? *m.received : m.free_buffer();
    m.received.reset();
    m.buffer_busy[b] = true;
    Impl::Staged s;
    s.buffer = b;
    const auto T = static_cast<std::int64_t>(batch.n_tokens());
    at::Tensor& buf = m.buffers[b];
    s.hidden = buf.narrow(1, 0, T);
    // Queued behind the step in flight, not waiting for it (host_copy.hpp).
    s.tokens = model::host_to_device(at::from_blob(batch.tokens.data(), {T}, at::kInt).to(at::kLong), m.device);
    s.loss_mask_host = at::from_blob(batch.loss_mask.data(), {T}, at::kByte).to(at::kFloat);
    s.loss_mask = model::host_to_device(s.loss_mask_host, m.device);
    // The slot goes back to FREE as soon as its copy completed, not when training on it ends.
    s.copy = m.slot_reader().stage(std::move(slot), buf.data_ptr());
    s.batch = std::move(batch);
    m.staged.push_back(std::move(s));
}

bool TorchDrafter::receive(ReadSlot& slot) {
    Impl& m = *impl_;
    const std::size_t b = m.free_buffer();
    if (!m.slot_reader().receive(slot, m.buffers[b].data_ptr())) return false;
    m.received = b;
    return true;
}

std::size_t TorchDrafter::staged() const { return impl_->staged.size(); }

BatchResult TorchDrafter::evaluate_one(const std::vector<std::uint64_t>& sample_ids) {
    Impl& m = *impl_;
    Impl::Staged s = std::move(m.staged.front());
    m.staged.pop_front();
    BatchResult r;
    auto t0 = Clock::now();
    m.wait_for_copy(s);
    // Micro-batches as in training (no activations are kept, but the logits chunks are).
    model::DrafterEvalSums sums;
    for (const auto& [first, last] : m.micro_batches(s)) {
        const std::vector<std::uint64_t> ids(sample_ids.begin() + static_cast<std::ptrdiff_t>(first),
                                             sample_ids.begin() + static_cast<std::ptrdiff_t>(last));
        sums.add(m.drafter->evaluate(m.head, m.micro_batch(s, first, last), ids, m.ctx.cfg.run.seed, m.loss_opts));
    }
    r.loss_sum = sums.loss_sum;
    r.weight_sum = sums.weight_sum;
    r.correct = sums.correct;
    r.counted = sums.counted;
    r.tokens = s.batch.n_tokens();
    r.h2d_ms = s.copy_ms;
    r.compute_ms = ms_since(t0);
    m.buffer_busy[s.buffer] = false;
    return r;
}

BatchResult TorchDrafter::train_one(bool sync_grads) {
    Impl& m = *impl_;
    Impl::Staged s = std::move(m.staged.front());
    m.staged.pop_front();
    BatchResult r;
    auto t0 = Clock::now();
    m.wait_for_copy(s);
    // Whole sequences in micro-batches of at most micro_batch_tokens context tokens: activation
    // memory follows the micro-batch, not the slot. Anchors depend on the run seed and the
    // micro-batch's first sample, so a redelivered or re-produced batch draws the same blocks.
    const auto split = m.micro_batches(s);
    m.synced = false;
    // Every number that crossed the process boundary is checked (its targets checked them too):
    // read with the batch's sums, no extra wait.
    const at::Tensor finite_input = at::isfinite(s.hidden).all().to(at::kDouble).reshape({1});
    at::Tensor sums;
    for (const auto& [first, last] : split) {  // sequences [first, last)
        const bool final_micro_batch = last == split.back().second;
        const model::DrafterBatch batch = m.micro_batch(s, first, last);
        at::Generator gen = at::detail::createCPUGenerator(mix64(m.ctx.cfg.run.seed ^ s.batch.positions[first]));
        model::DrafterLoss loss = m.drafter->loss(m.head, batch, m.loss_opts, gen);
        if (loss.units > 0) {
            // The step's last backward sums the accumulated gradients over the gang, bucket by
            // bucket while the rest of the backward runs.
            const bool arm = sync_grads && final_micro_batch && m.sync;
            if (arm) m.sync->arm(loss.loss_sum);
            const auto b0 = Clock::now();
            try {
                loss.loss_sum.backward();
            } catch (const distributed::GangBroken&) {
                throw;  // GradientSync's own message (exit 1: the gang is restarted)
            } catch (const std::exception& e) {
                if (!arm) throw;
                throw distributed::GangBroken(fmt::format(
                    "the drafter gang broke while summing gradients (a peer rank died or hung): {}",
                    distributed::error_text(e)));
            }
            if (arm) {
                m.synced = true;
                r.sync_ms = ms_since(b0);
            }
        }
        // [loss_sum, weight_sum, correct.., counted..] summed on the device in fp64: read once per
        // batch below, not a device sync per micro-batch.
        at::Tensor part = at::cat({loss.loss_sum.detach().reshape({1}), loss.weight_sum.reshape({1}), loss.correct,
                                   loss.counted}).to(at::kDouble);
        sums = sums.defined() ? sums.add_(part) : part;
    }
    if (sums.defined()) {
        const at::Tensor h = at::cat({finite_input, sums}).to(at::kCPU);  // the batch's one sync
        const double* v = h.data_ptr<double>() + 1;
        const auto n = static_cast<std::size_t>((h.numel() - 3) / 2);
        r.finite_input = h.data_ptr<double>()[0] != 0;
        r.loss_sum = v[0];
        r.weight_sum = v[1];
        r.correct.assign(v + 2, v + 2 + n);
        r.counted.assign(v + 2 + n, v + 2 + 2 * n);
    } else {
        r.finite_input = finite_input.item<double>() != 0;
    }
    m.step_weight += r.weight_sum;
    r.tokens = s.batch.n_tokens();
    r.h2d_ms = s.copy_ms;
    r.compute_ms = ms_since(t0);
    m.buffer_busy[s.buffer] = false;
    return r;
}

bool TorchDrafter::synced() const { return impl_->synced; }

double TorchDrafter::sync_grads() {
    Impl& m = *impl_;
    if (!m.sync) return 0;
    const auto t0 = Clock::now();
    m.sync->reduce_now();
    return ms_since(t0);
}

void TorchDrafter::discard_grads() {
    impl_->optimizer->zero_grad();
    impl_->step_weight = 0;
}

StepResult TorchDrafter::optimizer_step(double lr, double weight_sum) {
    Impl& m = *impl_;
    StepResult r;
    for (auto& group : m.optimizer->param_groups())
        static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    if (weight_sum > 0) {
        // HSRING_FAULT ...:grad:N:nan: a gradient turns NaN, as from an overflow in the backward.
        if (fault::poison("grad"))
            for (auto& p : m.drafter->module().parameters())
                if (p.grad().defined()) {
                    p.grad().view(-1)[0].fill_(std::numeric_limits<float>::quiet_NaN());
                    break;
                }
        // The gang's reducer averaged the ranks' sums: back to the sum, then the token-weighted mean
        // over the whole global batch; clipped; AdamW (one fused pass, fused_adamw.hpp), which
        // changes nothing when the norm is not finite.
        const double divisor = weight_sum / (m.sync ? double(m.sync->world()) : 1.0);
        const at::Tensor norm = m.fused_step->step(divisor, m.ctx.cfg.train.grad_clip);
        if (norm.defined()) r.grad_norm = norm.item<double>();
        r.skipped = !std::isfinite(r.grad_norm);
    }
    m.optimizer->zero_grad();
    m.step_weight = 0;
    r.device_peak_bytes = device_peak_bytes(m.device);
    m.snapshots.allocate();  // once: after the first step
    return r;
}

bool TorchDrafter::snapshot_ready() {
    impl_->snapshots.allocate();  // normally after the first step; a checkpoint before it asks now
    return impl_->snapshots.ready_now();
}

std::unique_ptr<StateSnapshot> TorchDrafter::snapshot() {
    Impl& m = *impl_;
    torch::NoGradGuard no_grad;
    std::shared_ptr<HostState>& buffer = m.snapshots.acquire();
    HostState& h = *buffer;
    const auto no_allocation = m.snapshots.hold_allocation();  // until the copies below are done
    // Pinned only for background writes (kept for the run, allocated at start); a checkpoint
    // written in the step copies to pageable memory and pins nothing for good.
    const bool pinned = m.device.is_cuda() && m.ctx.cfg.train.checkpoint_background;
    // Asynchronous device -> pinned host copies on the compute stream, one wait at the end.
    auto copy_out = [&](at::Tensor& dst, const at::Tensor& src) {
        if (!dst.defined() || dst.sizes() != src.sizes() || dst.scalar_type() != src.scalar_type())
            dst = at::empty(src.sizes(), at::TensorOptions().dtype(src.scalar_type()).pinned_memory(pinned));
        dst.copy_(src, /*non_blocking=*/pinned);
    };
    const auto named = m.drafter->module().named_parameters();
    const std::size_t n = named.size();
    {
        std::vector<std::pair<std::string, at::Tensor>> check;
        for (std::size_t i = 0; i < n; ++i) {
            const at::Tensor& p = named[i].value();
            check.emplace_back(named[i].key(), p);
            auto it = m.optimizer->state().find(p.unsafeGetTensorImpl());
            if (it == m.optimizer->state().end()) continue;
            const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
            check.emplace_back(named[i].key() + " (AdamW first moment)", st.exp_avg());
            check.emplace_back(named[i].key() + " (AdamW second moment)", st.exp_avg_sq());
        }
        require_finite(check, "checkpoint");
    }
    h.names.resize(n);
    h.params.resize(n);
    h.exp_avg.resize(n);
    h.exp_avg_sq.resize(n);
    h.max_exp_avg_sq.resize(n);
    h.steps.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
        const at::Tensor& p = named[i].value();
        h.names[i] = named[i].key();
        copy_out(h.params[i], p);
        auto it = m.optimizer->state().find(p.unsafeGetTensorImpl());
        if (it == m.optimizer->state().end()) {
            h.exp_avg[i] = h.exp_avg_sq[i] = h.max_exp_avg_sq[i] = at::Tensor();
            continue;
        }
        const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
        h.steps[i] = st.step();
        copy_out(h.exp_avg[i], st.exp_avg());
        copy_out(h.exp_avg_sq[i], st.exp_avg_sq());
        if (st.max_exp_avg_sq().defined()) copy_out(h.max_exp_avg_sq[i], st.max_exp_avg_sq());
        else h.max_exp_avg_sq[i] = at::Tensor();
    }
#ifdef HSRING_TORCH_CUDA
    if (pinned) c10::cuda::getCurrentCUDAStream(m.device.index()).synchronize();
#endif
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(m.optimizer->param_groups().front().options());
    return std::make_unique<TorchSnapshot>(buffer, m.drafter->exporter(), options);
}

void TorchDrafter::export_model(const std::filesystem::path& dir) {
    Impl& m = *impl_;
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (const auto& p : m.drafter->module().named_parameters()) named.emplace_back(p.key(), p.value());
    require_finite(named, fmt::format("export to {}", dir.string()));
    m.drafter->export_to(dir, m.device.is_cuda() ? at::kBFloat16 : at::kFloat);
}

} // namespace hsring::worker
