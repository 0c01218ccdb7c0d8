#include "worker/torch/torch_target.hpp"

#include "hsring/error.hpp"
#include "hsring/fault.hpp"
#include "hsring/log.hpp"
#include "hsring/transport.hpp"
#include "model/decode/generate.hpp"
#include "model/target/target.hpp"
#include "worker/core/plan_room.hpp"
#include "worker/torch/spec_probe.hpp"
#include "worker/torch/torch_util.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <limits>

namespace hsring::worker {

namespace {
// The writer's options: a peer writer out of buffers gives back a later plan slot of its own
// (plan_room.hpp) rather than wait for drafters that need the one it is writing first.
transport::TransportOptions writer_options(Context& c, bool cuda) {
    auto o = transport::options_for(c.cfg, cuda);
    o.make_room = [&ring = c.ring](WriteSlot& w) { return give_back_later_commit(ring, w); };
    return o;
}
} // namespace

struct TorchTarget::Impl {
    Context& ctx;
    at::Device device;
    at::ScalarType compute_dtype, ring_dtype;
    model::TargetModel model;
    std::unique_ptr<transport::SlotWriter> writer;
    DeviceTimer timer;

    Impl(Context& c, at::Device d)
        : ctx(c), device(d), compute_dtype(d.is_cuda() ? scalar_type(c.cfg.target.dtype) : at::kFloat),
          ring_dtype(scalar_type(c.cfg.ring.dtype)),
          model(model::TargetModel::load(c.derived.target, d, compute_dtype, c.cfg.run.seed,
                                          c.cfg.target.weights == TargetWeights::FP8)),
          writer(transport::make_slot_writer(c.ring, writer_options(c, d.is_cuda()))), timer(d) {}
};

TorchTarget::TorchTarget(Context& ctx) {
    const at::Device device = worker_device(ctx.env.cuda);
    if (!device.is_cuda()) configure_cpu_threads(ctx.cfg);
    const auto t0 = std::chrono::steady_clock::now();
    impl_ = std::make_unique<Impl>(ctx, device);
    std::string ids;
    for (int id : ctx.derived.layer_ids) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    log::info("target {} loaded on {} in {:.1f} s ({}, {} linear weights{}; captured layers {})",
              ctx.derived.target.source, device.str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              c10::toString(impl_->compute_dtype), to_string(ctx.cfg.target.weights),
              ctx.cfg.target.weights == TargetWeights::FP8 && !device.is_cuda() ? " (emulated on the CPU)" : "", ids);
    probe_ = std::make_unique<SpecProbe>(ctx, impl_->model);
    if (!probe_->active()) probe_.reset();
}

void TorchTarget::between_slots() {
    if (!probe_) return;
    try {
        probe_->work();
    } catch (const std::exception& e) {
        // Side work: a failure (out of memory on a full GPU) ends the measurements, not the target.
        log::warn("tau during training stopped: {}", e.what());
        probe_.reset();
    }
}

TorchTarget::~TorchTarget() = default;

std::vector<std::vector<std::int64_t>> TorchTarget::generate_answers(const std::vector<AnswerRequest>& requests) {
    const GenerateConfig& g = impl_->ctx.cfg.generate;
    model::GenerateOptions o;
    o.sampling = {g.temperature, g.top_p};
    o.stop_tokens = impl_->ctx.derived.stop_tokens;
    o.batch = g.batch;
    o.max_new_tokens = 1;
    std::vector<model::GenerateRequest> reqs;
    reqs.reserve(requests.size());
    for (const AnswerRequest& r : requests) {
        reqs.push_back({r.prompt, r.seed});
        // The longest room: a request's tokens do not depend on the others' (generate.hpp); a
        // shorter room keeps a prefix.
        o.max_new_tokens = std::max<std::int64_t>(o.max_new_tokens, r.room);
    }
    model::GenerateResult res = model::generate(impl_->model, reqs, o);
    std::vector<std::vector<std::int64_t>> out;
    out.reserve(res.outputs.size());
    for (auto& x : res.outputs) out.push_back(std::move(x.tokens));
    return out;
}

std::vector<std::uint8_t> TorchTarget::write(const PackedBatch& batch, WriteSlot& slot) {
    Impl& m = *impl_;
    const auto T = static_cast<std::int64_t>(batch.n_tokens());
    at::Tensor tokens = at::from_blob(const_cast<std::int32_t*>(batch.tokens.data()), {T}, at::kInt)
                            .to(m.device, at::kLong);
    m.timer.start();
    m.writer->begin(slot, batch.n_tokens());
    // HSRING_FAULT ...:hidden:N:nan: the first sample's states turn NaN, as from a broken model.
    const bool poison = fault::poison("hidden");
    // Tokens with a non-finite value in any captured layer, OR-ed over the layers on the device.
    at::Tensor bad = at::zeros({T}, at::TensorOptions().dtype(at::kBool).device(m.device));
    // Each captured layer is handed to the transport as soon as it is computed; the tensor stays
    // alive (the transport holds it) until its copy completed.
    auto on_layer = [&](std::size_t i, const at::Tensor& hidden) {
        at::Tensor x = (hidden.scalar_type() == m.ring_dtype ? hidden : hidden.to(m.ring_dtype)).contiguous();
        if (poison && i == 0) x.narrow(0, 0, batch.lengths.front()).fill_(std::numeric_limits<float>::quiet_NaN());
        // Checked in the ring's dtype (an fp32 value too large for bf16 is inf there). The rows
        // with a non-finite value are zeroed in place before the copy, so no NaN ever crosses
        // into the ring. In place is safe: x is this layer's output (or a copy of it), which the
        // model reads again only as the next layer's input, and only for the same rows: the
        // rows of a sample that is rejected anyway (attention never mixes packed sequences).
        const at::Tensor row_bad = x.isfinite().all(-1).logical_not_();
        x.masked_fill_(row_bad.unsqueeze(-1), 0);
        bad.logical_or_(row_bad);
        const void* rows = x.data_ptr();
        m.writer->put_layer(static_cast<std::uint32_t>(i), rows, current_stream(m.device),
                            std::make_shared<at::Tensor>(std::move(x)));
    };
    m.model.forward(tokens, batch.cu_seqlens(), m.ctx.derived.layer_ids, on_layer);
    m.timer.stop();
    m.writer->finish();
    last_compute_s_ = m.timer.seconds();
    // Per sample: any of its tokens bad (one small copy; the forward is done).
    const at::Tensor per_token = bad.to(at::kCPU);
    const bool* b = per_token.data_ptr<bool>();
    std::vector<std::uint8_t> out(batch.positions.size(), 0);
    std::int64_t off = 0;
    for (std::size_t i = 0; i < batch.lengths.size(); ++i) {
        for (std::int64_t t = off; t < off + batch.lengths[i] && !out[i]; ++t) out[i] = b[t] ? 1 : 0;
        off += batch.lengths[i];
    }
    return out;
}

} // namespace hsring::worker
