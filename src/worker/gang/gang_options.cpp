#include "worker/gang/gang_options.hpp"

#include "hsring/run_identity.hpp"

#include <chrono>

namespace hsring::worker {

distributed::GangOptions gang_options(const Context& ctx) {
    distributed::GangOptions o;
    o.rendezvous.place = ctx.env.gang;
    o.rendezvous.master_addr = ctx.env.master_addr;
    o.rendezvous.master_port = static_cast<std::uint16_t>(ctx.env.master_port);
    o.rendezvous.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(ctx.env.dist_timeout_s * 1000.0));
    o.rendezvous.identity = run_identity(ctx.cfg, ctx.derived, ctx.ledger.info().data_fingerprint, 0);
    o.cuda = ctx.env.cuda;
    return o;
}

} // namespace hsring::worker
