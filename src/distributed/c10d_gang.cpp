// The drafter gang over c10d (see c10d_gang.hpp).
#include "distributed/c10d_gang.hpp"

#include "hsring/error.hpp"
#include "hsring/log.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>
#include <string>

namespace hsring::distributed {

namespace {

bool is_loopback(const std::string& addr) {
    return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// Where Gloo listens for its peers: GLOO_SOCKET_IFNAME (as torch.distributed honours it), the
// loopback address when the master is on this host, else this host's name.
std::shared_ptr<::gloo::transport::Device> gloo_device(const std::string& master_addr) {
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
        return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
    if (is_loopback(master_addr)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
    return c10d::ProcessGroupGloo::createDefaultDevice();
}

} // namespace

C10dGang::C10dGang(GangPlace place, Rendezvous rz, c10::intrusive_ptr<c10d::ProcessGroup> pg, at::Device device,
                   std::chrono::milliseconds timeout)
    : Gang(place), rz_(std::move(rz)), pg_(std::move(pg)), device_(device), timeout_(timeout) {}

C10dGang::~C10dGang() = default;

std::unique_ptr<C10dGang> C10dGang::join(const GangOptions& o) {
    const RendezvousOptions& ro = o.rendezvous;
    const GangPlace& p = ro.place;
    Rendezvous rz = rendezvous(ro);
    const int rank = static_cast<int>(p.global_rank()), world = static_cast<int>(p.world());
    const std::chrono::milliseconds timeout = o.collective_timeout.value_or(ro.timeout);
    auto pg = c10::make_intrusive<c10d::ProcessGroup>(rz.group_store, rank, world);
    at::Device device(at::kCPU);
    const char* backend_name = "gloo";
    if (o.cuda) {
#ifdef USE_C10D_NCCL
        // Read by the constructor: CPU-blocking waits that throw at the timeout, no watchdog that
        // would abort the process first (see c10d_gang.hpp). Ours, whatever the environment says.
        ::setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 1);
        auto opts = c10d::ProcessGroupNCCL::Options::create();
        opts->timeout = timeout;
        auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(rz.group_store, rank, world, opts);
        pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
        pg->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
        device = at::Device(at::kCUDA, 0);  // CUDA_VISIBLE_DEVICES holds the worker's GPU
        backend_name = "nccl";
#else
        fail("this hsring was built without NCCL (torch_cuda not linked): GPU drafters cannot form a gang; build "
             "with -Dtorch_cuda=enabled on a machine with a GPU");
#endif
    } else {
        auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
        opts->devices.push_back(gloo_device(ro.master_addr));
        auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(rz.group_store, rank, world, opts);
        pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
        pg->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
    }
    std::unique_ptr<C10dGang> gang(new C10dGang(p, std::move(rz), std::move(pg), device, timeout));
    // A first collective: every rank is connected before rank 0 declares the round formed.
    double one = 1;
    gang->allreduce_sum({&one, 1});
    if (one != static_cast<double>(world))
        fail("the drafter gang's first all-reduce gave {} instead of {}", one, world);
    if (p.is_master()) gang->rz_.mark_formed();
    else gang->rz_.keep_beating(p.global_rank());
    log::info("drafter gang formed: rank {} of {} (machine {} of {}, local rank {}), {} over rendezvous round {} at "
              "{}:{}", rank, world, p.node_rank, p.nnodes, p.local_rank, backend_name, gang->rz_.round,
              ro.master_addr, ro.master_port);
    return gang;
}

void C10dGang::wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what) const {
    try {
        work->wait(timeout_);
    } catch (const std::exception& e) {
        throw GangBroken(fmt::format("the drafter gang broke during {} (a peer rank died, hung past [distributed] "
                                     "timeout_s = {:g} s, or its machine is gone; the supervisors restart the gang "
                                     "from the last checkpoint): {}", what,
                                     static_cast<double>(timeout_.count()) / 1000.0, error_text(e)));
    }
}

void C10dGang::allreduce(std::span<double> values, c10d::ReduceOp op) {
    if (values.empty()) return;
    at::Tensor host = at::from_blob(values.data(), {static_cast<std::int64_t>(values.size())}, at::kDouble);
    std::vector<at::Tensor> t{device_.is_cuda() ? host.to(device_) : host};
    c10d::AllreduceOptions opts;
    opts.reduceOp = op;
    try {
        wait(pg_->allreduce(t, opts), "an all-reduce of the step's statistics");
    } catch (const GangBroken&) {
        throw;
    } catch (const std::exception& e) {
        throw GangBroken(fmt::format("the drafter gang broke during an all-reduce (a peer rank died or its machine is "
                                     "gone): {}", error_text(e)));
    }
    if (device_.is_cuda()) host.copy_(t[0].cpu());
}

void C10dGang::allreduce_sum(std::span<double> values) { allreduce(values, c10d::ReduceOp::SUM); }
void C10dGang::allreduce_max(std::span<double> values) { allreduce(values, c10d::ReduceOp::MAX); }

std::unique_ptr<Gang> open_gang(const GangOptions& o) {
    if (o.rendezvous.place.world() == 1) return std::make_unique<SoloGang>();
    return C10dGang::join(o);
}

} // namespace hsring::distributed
