// TorchDrafter (torch_drafter.hpp): staging slots, training and evaluating them in micro-batches,
// the gang's gradient sums and the optimizer step. Restore, snapshots and export:
// torch_drafter_state.cpp.
#include "worker/torch/torch_drafter_impl.hpp"

namespace hsring::worker {

namespace {
std::uint64_t mix64(std::uint64_t x) { return data::detail::mix64(x + data::detail::kGolden); }
} // namespace

TorchDrafter::TorchDrafter(Context& ctx, distributed::Gang& gang) : impl_(std::make_unique<Impl>(ctx, gang)) {}
TorchDrafter::~TorchDrafter() = default;

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
    BatchResult r;
    auto t0 = Clock::now();
    Impl::Staged s = m.take_staged();
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
    BatchResult r;
    auto t0 = Clock::now();
    Impl::Staged s = m.take_staged();
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

} // namespace hsring::worker
