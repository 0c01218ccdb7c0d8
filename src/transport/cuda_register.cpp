#include "transport/ring_cuda.hpp"

#include "hsring/error.hpp"
#include "hsring/log.hpp"
#include "hsring/units.hpp"
#include "shm/region.hpp"

#include <boost/interprocess/sync/file_lock.hpp>
#include <boost/interprocess/sync/scoped_lock.hpp>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>

namespace hsring {

namespace {
// One lock file per ring name in the shm directory (tmpfs: flock works there; hugetlbfs holds
// only huge-page-sized files).
std::string lock_path(const Ring& ring) { return shm::shm_dir() + "/." + ring.name() + ".cuda-register.lock"; }
} // namespace

CudaRegistration::CudaRegistration(const Ring& ring, std::size_t chunk_bytes) {
    namespace bip = boost::interprocess;
    const auto area = ring.payload_area();
    const std::string lock_file = lock_path(ring);
    int fd = ::open(lock_file.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) fail("cannot create the CUDA registration lock {}: {}", lock_file, errno_text(errno));
    ::close(fd);
    bip::file_lock lock(lock_file.c_str());
    bip::scoped_lock<bip::file_lock> guard(lock);
    const auto t0 = std::chrono::steady_clock::now();
    // Chunks hold whole slots: one cudaMemcpy may not span two registrations (seen on the GPU
    // machine: cudaErrorInvalidValue), and every copy covers (part of) one slot.
    const std::size_t stride = area.size() / ring.geometry().slot_count;
    const std::size_t step = std::max<std::size_t>(1, chunk_bytes / stride) * stride;
    for (std::size_t off = 0; off < area.size(); off += step) {
        const std::size_t n = std::min(step, area.size() - off);
        void* p = area.data() + off;
        cudaError_t err = cudaHostRegister(p, n, cudaHostRegisterPortable);
        if (err != cudaSuccess) {
            cudaGetLastError();  // clear it: a failed registration must not poison later calls
            for (auto& [q, m] : chunks_) cudaHostUnregister(q);
            cudaGetLastError();
            chunks_.clear();
            fail("cudaHostRegister of ring '{}' ({} at offset {} of {}) failed: {}: {}. Check `ulimit -l` (locked "
                 "memory), free host memory, and that no other process is registering the same pages",
                 ring.name(), format_bytes(n), format_bytes(off), format_bytes(area.size()), cudaGetErrorName(err),
                 cudaGetErrorString(err));
        }
        chunks_.emplace_back(p, n);
    }
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log::debug("registered ring '{}' ({}) with CUDA in {} chunk(s), {:.3f} s", ring.name(), format_bytes(area.size()),
               chunks_.size(), seconds_);
}

std::shared_ptr<CudaRegistration> CudaRegistration::shared(const Ring& ring) {
    static std::mutex mu;
    static std::map<const std::byte*, std::weak_ptr<CudaRegistration>> by_mapping;
    const std::lock_guard<std::mutex> guard(mu);
    auto& weak = by_mapping[ring.payload_area().data()];
    if (auto r = weak.lock()) return r;
    auto r = std::make_shared<CudaRegistration>(ring);
    log::info("ring registered with CUDA in {:.2f} s ({} chunk(s))", r->seconds(), r->chunks());
    weak = r;
    return r;
}

CudaRegistration::~CudaRegistration() {
    for (auto& [p, n] : chunks_) cudaHostUnregister(p);
    cudaGetLastError();
}

} // namespace hsring
