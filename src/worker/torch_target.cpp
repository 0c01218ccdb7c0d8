#include "worker/torch_target.hpp"

#include "hsring/error.hpp"
#include "hsring/log.hpp"
#include "model/target.hpp"
#include "worker/torch_util.hpp"

#ifdef HSRING_TORCH_CUDA
#include "hsring/ring_cuda.hpp"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <chrono>
#include <cstring>

namespace hsring::worker {

struct TorchTarget::Impl {
    Context& ctx;
    at::Device device;
    at::ScalarType compute_dtype, ring_dtype;
    model::TargetModel model;
    std::uint64_t row_bytes, layer_stride;
#ifdef HSRING_TORCH_CUDA
    std::unique_ptr<CudaRegistration> registration;
    std::optional<c10::cuda::CUDAStream> copy_stream;
    std::vector<at::Tensor> in_flight;  // layers being copied: alive until the copy ends
#endif

    Impl(Context& c, at::Device d)
        : ctx(c), device(d), compute_dtype(d.is_cuda() ? scalar_type(c.cfg.target.dtype) : at::kFloat),
          ring_dtype(scalar_type(c.cfg.ring.dtype)),
          model(model::TargetModel::load(c.derived.target, d, compute_dtype, c.cfg.run.seed)),
          row_bytes(std::uint64_t(c.derived.target.hidden_size) * dtype_bytes(c.cfg.ring.dtype)),
          layer_stride(c.cfg.ring.slot_tokens * row_bytes) {
#ifdef HSRING_TORCH_CUDA
        if (device.is_cuda()) {
            registration = std::make_unique<CudaRegistration>(ctx.ring);
            copy_stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device.index());
            log::info("ring registered with CUDA in {:.2f} s ({} chunk(s))", registration->seconds(), registration->chunks());
        }
#endif
    }
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
    std::byte* base = slot.payload().data();
    const std::uint64_t bytes = static_cast<std::uint64_t>(T) * m.row_bytes;
    auto on_layer = [&](std::size_t i, const at::Tensor& hidden) {
        at::Tensor x = (hidden.scalar_type() == m.ring_dtype ? hidden : hidden.to(m.ring_dtype)).contiguous();
        std::byte* dst = base + i * m.layer_stride;
        if (!m.device.is_cuda()) {
            std::memcpy(dst, x.data_ptr(), bytes);
            return;
        }
#ifdef HSRING_TORCH_CUDA
        // The copy stream waits for this layer only; later layers keep computing meanwhile.
        at::cuda::CUDAEvent ready;
        ready.record(at::cuda::getCurrentCUDAStream(m.device.index()));
        ready.block(*m.copy_stream);
        C10_CUDA_CHECK(cudaMemcpyAsync(dst, x.data_ptr(), bytes, cudaMemcpyDeviceToHost, m.copy_stream->stream()));
        m.in_flight.push_back(std::move(x));
#endif
    };
    m.model.forward(tokens, batch.cu_seqlens(), m.ctx.derived.layer_ids, on_layer);
#ifdef HSRING_TORCH_CUDA
    if (m.device.is_cuda()) {
        m.copy_stream->synchronize();  // every byte is in the slot before the commit
        m.in_flight.clear();
    }
#endif
}

} // namespace hsring::worker
