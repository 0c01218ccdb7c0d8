// hsring-synth-worker --role target|drafter --config FILE --run-dir DIR: the [run] mode =
// "synthetic" worker (see synth_compute.hpp and CONTRACT.md). No model; CUDA only to move the
// patterns through a GPU transport; data-parallel drafter ranks form their gang over c10d (Gloo)
// like the real drafters.
//   HSRING_SYNTH_STEP_MS=N  simulate N ms of compute per drafter batch (tests kill mid-step)
//   HSRING_SYNTH_FAIL=ROLE  exit 1 at start when this worker has that role (crash-loop drills)
//   HSRING_SYNTH_WRITE_MS=N hold each slot WRITING N ms (tests kill a target mid-write); a list
//                           N0,N1,... gives target rank r its own Nr (unbalanced targets: bench/pipeline)
//   HSRING_SYNTH_STAGE_MS=N hold each slot READING N ms (tests kill the drafter mid-read)
//   HSRING_SYNTH_CUDA=1     with [transport] kind = "host": GPU workers move their patterns through
//                           the GPU (the peer kinds always do)
#include "hsring/log.hpp"
#include "worker/core/context.hpp"
#include "worker/gang/gang_options.hpp"
#include "worker/core/plan_room.hpp"
#include "worker/synth/synth_compute.hpp"

#include <cstdlib>
#include <string>

namespace {

int body(int argc, char** argv) {
    using namespace hsring::worker;
    auto ctx = Context::open(argc, argv);
    // Bytes go through the GPU for the peer kinds (they need it), and on request for "host".
    const bool cuda = ctx->env.cuda && (ctx->cfg.transport.kind != hsring::TransportKind::Host ||
                                        std::getenv("HSRING_SYNTH_CUDA") != nullptr);
    if (ctx->env.role == hsring::WorkerRole::Drafter) hsring::transport::prepare_drafter_devices(ctx->cfg, cuda);
    const auto transport = hsring::transport::options_for(ctx->cfg, cuda);
    const char* fail_role = std::getenv("HSRING_SYNTH_FAIL");
    const std::string role = hsring::to_string(ctx->env.role);
    if (fail_role && role == fail_role) {
        hsring::log::error("HSRING_SYNTH_FAIL={}: failing on purpose", fail_role);
        return kExitFailure;
    }
    if (ctx->env.role == hsring::WorkerRole::Target) {
        mark_started();
        const char* wms = std::getenv("HSRING_SYNTH_WRITE_MS");
        double hold = 0;
        if (wms) {
            // One value for every target, or one per target rank.
            std::string list = wms;
            for (std::uint32_t r = 0;; ++r) {
                const auto comma = list.find(',');
                if (r == ctx->env.rank || comma == std::string::npos) {
                    hold = std::atof(list.substr(0, comma).c_str());
                    break;
                }
                list.erase(0, comma + 1);
            }
        }
        auto writer = transport;  // see torch_target.cpp: a peer writer out of buffers makes room
        writer.make_room = [&ring = ctx->ring](hsring::WriteSlot& w) { return give_back_later_commit(ring, w); };
        SynthTarget t(ctx->ring, writer, hold);
        return run_target(*ctx, t);
    }
    const char* ms = std::getenv("HSRING_SYNTH_STEP_MS");
    const char* sms = std::getenv("HSRING_SYNTH_STAGE_MS");
    if (ctx->env.gang_generation > 1) mark_started();  // see drafter_main.cpp
    auto options = gang_options(*ctx);
    options.cuda = false;  // synthetic drafters compute nothing on a GPU: Gloo
    auto gang = hsring::distributed::open_gang(options);
    SynthDrafter d(ctx->ring, transport, ctx->cfg.drafter.inflight_slots, *gang,
                   ctx->env.gang.node_rank, ms ? std::atof(ms) : 0.0, sms ? std::atof(sms) : 0.0);
    return run_drafter(*ctx, d, *gang);
}

} // namespace

int main(int argc, char** argv) { return hsring::worker::run_guarded("hsring-synth-worker", body, argc, argv); }
