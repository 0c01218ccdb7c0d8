#include "worker/torch_target.hpp"

#include "hsring/error.hpp"
#include "hsring/log.hpp"
#include "hsring/transport.hpp"
#include "model/target.hpp"
#include "worker/torch_util.hpp"

#include <chrono>

namespace hsring::worker {

struct TorchTarget::Impl {
    Context& ctx;
    at::Device device;
    at::ScalarType compute_dtype, ring_dtype;
    model::TargetModel model;
    std::unique_ptr<transport::SlotWriter> writer;

    Impl(Context& c, at::Device d)
        : ctx(c), device(d), compute_dtype(d.is_cuda() ? scalar_type(c.cfg.target.dtype) : at::kFloat),
          ring_dtype(scalar_type(c.cfg.ring.dtype)),
          model(model::TargetModel::load(c.derived.target, d, compute_dtype, c.cfg.run.seed)),
          writer(transport::make_slot_writer(c.ring, transport::options_for(c.cfg, d.is_cuda()))) {}
};

TorchTarget::TorchTarget(Context& ctx) {
    const at::Device device = worker_device(ctx.env.cuda);
    if (!device.is_cuda()) configure_cpu_threads(ctx.cfg);
    const auto t0 = std::chrono::steady_clock::now();
    impl_ = std::make_unique<Impl>(ctx, device);
    std::string ids;
    for (int id : ctx.derived.layer_ids) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    log::info("target {} loaded on {} in {:.1f} s ({}; captured layers {})", ctx.derived.target.source, device.str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              c10::toString(impl_->compute_dtype), ids);
}

TorchTarget::~TorchTarget() = default;

void TorchTarget::write(const PackedBatch& batch, WriteSlot& slot) {
    Impl& m = *impl_;
    const auto T = static_cast<std::int64_t>(batch.n_tokens());
    at::Tensor tokens = at::from_blob(const_cast<std::int32_t*>(batch.tokens.data()), {T}, at::kInt)
                            .to(m.device, at::kLong);
    m.writer->begin(slot, batch.n_tokens());
    // Each captured layer is handed to the transport as soon as it is computed; the tensor stays
    // alive (the transport holds it) until its copy completed.
    auto on_layer = [&](std::size_t i, const at::Tensor& hidden) {
        at::Tensor x = (hidden.scalar_type() == m.ring_dtype ? hidden : hidden.to(m.ring_dtype)).contiguous();
        const void* rows = x.data_ptr();
        m.writer->put_layer(static_cast<std::uint32_t>(i), rows, current_stream(m.device),
                            std::make_shared<at::Tensor>(std::move(x)));
    };
    m.model.forward(tokens, batch.cu_seqlens(), m.ctx.derived.layer_ids, on_layer);
    m.writer->finish();
}

} // namespace hsring::worker
