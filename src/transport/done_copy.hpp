#pragma once
// A staged copy that completed before stage() returned (a CPU memcpy, or a peer pull that
// receive() already waited for): nothing to wait for, only its time to report.
#include "hsring/transport.hpp"

namespace hsring::transport {

class DoneCopy final : public StagedCopy {
public:
    explicit DoneCopy(double ms) : ms_(ms) {}
    void wait(GpuStream) override {}
    double copy_ms() const override { return ms_; }

private:
    double ms_;
};

} // namespace hsring::transport
