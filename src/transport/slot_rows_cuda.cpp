#include "hsring/error.hpp"
#include "transport/ring_cuda.hpp"

namespace hsring {

void copy_filled_rows_async(void* dst, const void* payload, const FilledRows& f, cudaStream_t stream,
                            cudaMemcpyKind kind) {
    // n_layers plain copies rather than one cudaMemcpy2DAsync: its pitch is limited
    // (cudaDevAttrMaxPitch, 2^31 - 1 bytes on current GPUs) and a layer of a large slot exceeds it.
    auto* d = static_cast<std::byte*>(dst);
    const auto* s = static_cast<const std::byte*>(payload);
    for (std::uint64_t i = 0; i < f.runs; ++i) {
        const cudaError_t err =
            cudaMemcpyAsync(d + i * f.stride, s + i * f.stride, f.run_bytes, kind, stream);
        if (err != cudaSuccess) {
            (void)cudaGetLastError();  // clear it where the runtime allows
            fail("{} copy of a slot's rows (run {} of {}, {} bytes) failed: {}: {}",
                 kind == cudaMemcpyDeviceToDevice ? "peer device->device" : "host->device", i + 1, f.runs,
                 f.run_bytes, cudaGetErrorName(err), cudaGetErrorString(err));
        }
    }
}

} // namespace hsring
