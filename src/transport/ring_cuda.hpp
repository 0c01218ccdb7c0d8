#pragma once
// Registering a ring's payload area with CUDA, so device<->slot copies are DMA straight from
// and to shared memory (no staging copy; invariant 2, docs/architecture.md). Writers and readers both
// register. Only in builds with the CUDA runtime (HSRING_HAVE_CUDA).
#include "hsring/ring.hpp"
#include "hsring/slot_rows.hpp"

#ifdef HSRING_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include <cstddef>
#include <utility>
#include <memory>
#include <vector>

namespace hsring {

#ifdef HSRING_HAVE_CUDA
class CudaRegistration {
public:
    // cudaHostRegister(portable) of the payload area in chunks of whole slots, at most
    // `chunk_bytes` unless one slot is larger (one call over 512 GiB fails on r580 drivers),
    // serialised across processes with a file lock next to
    // the ring (concurrent registration of the same pages is flaky). On failure every chunk
    // registered so far is unregistered, the CUDA error cleared, and hsring::Error thrown.
    explicit CudaRegistration(const Ring& ring, std::size_t chunk_bytes = kDefaultChunk);
    ~CudaRegistration();
    CudaRegistration(const CudaRegistration&) = delete;
    CudaRegistration& operator=(const CudaRegistration&) = delete;

    // The registration of `ring`'s mapping in this process, made on first use and shared by every
    // writer and reader of it here (CUDA refuses the same pages twice:
    // cudaErrorHostMemoryAlreadyRegistered), logged once when made; unregistered when the last
    // one lets go.
    static std::shared_ptr<CudaRegistration> shared(const Ring& ring);

    double seconds() const { return seconds_; }  // how long registration took
    std::size_t chunks() const { return chunks_.size(); }

    static constexpr std::size_t kDefaultChunk = std::size_t(64) << 30;

private:
    std::vector<std::pair<void*, std::size_t>> chunks_;
    double seconds_ = 0;
};

// Queues the copy of a slot's filled rows (slot_rows.hpp) from `payload` (registered host memory,
// or a peer device buffer of the payload's layout with cudaMemcpyDeviceToDevice) into `dst` on
// `stream`: one cudaMemcpyAsync per run. Throws hsring::Error when a call fails.
void copy_filled_rows_async(void* dst, const void* payload, const FilledRows& f, cudaStream_t stream,
                            cudaMemcpyKind kind = cudaMemcpyHostToDevice);
#endif

} // namespace hsring
