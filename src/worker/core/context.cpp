#include "worker/core/context.hpp"

#include "hsring/dataset_options.hpp"
#include "hsring/error.hpp"
#include "hsring/fault.hpp"
#include "hsring/log.hpp"

#include <unistd.h>

#include <cstdlib>

namespace hsring::worker {

std::unique_ptr<Context> Context::open(int argc, char** argv) {
    // The config path first (for defaults), then the full environment.
    std::filesystem::path cfg_path;
    for (int i = 1; i + 1 < argc; ++i)
        if (std::string(argv[i]) == "--config") cfg_path = argv[i + 1];
    if (cfg_path.empty()) fail("--config FILE is required");
    Config cfg = load_config(cfg_path);
    // The supervisor passes the machine's place in the run (launcher variables and --node-rank
    // applied); by hand, the launcher variables apply as they do for `hsring run`.
    apply_launcher_overrides(cfg);
    for (auto [key, field] : {std::pair{env::kNnodes, &cfg.distributed.nnodes}, {env::kNodeRank, &cfg.distributed.node_rank}})
        if (const char* v = std::getenv(key); v && *v) *field = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
    Derived derived = derive(cfg);
    WorkerEnv env = parse_worker_env(argc, argv, &cfg, &derived);
    setup_process(env);
    // A misspelled HSRING_FAULT would never fire: refused before anything starts (exit 3).
    fault::configure(env.name, {static_cast<std::uint32_t>(cfg.topology.targets.size()),
                                static_cast<std::uint32_t>(cfg.topology.drafters.size())});
    // `hsring run --run-dir DIR` overrides [run] run_dir: the default export dir follows it.
    derived.run_dir = env.run_dir;
    if (cfg.drafter.export_dir.empty()) derived.export_dir = env.run_dir / "drafter";
    const RingGeometry geometry = derived.ring;
    // Targets read the data set and check the ledger belongs to it; the drafter needs neither.
    std::optional<data::Dataset> data;
    std::optional<LedgerInfo> want;
    if (env.role == WorkerRole::Target) {
        data = data::Dataset::load(cfg.resolve(cfg.data.path), data::dataset_options(cfg, derived));
        const auto& dist = cfg.distributed;
        want = LedgerInfo{data->fingerprint(), data::shard_size(data->size(), dist.nnodes, dist.node_rank),
                          cfg.data.epochs, cfg.run.seed, cfg.data.shuffle, data->size(), dist.nnodes, dist.node_rank};
    }
    // Only this run's shared memory (invariant 8, docs/architecture.md): run dir, user, layout, machine, and
    // for targets the data set. The drafter does not read the data: 0 skips that comparison.
    const RunTag tag = RunTag::of(env.run_dir.string(), geometry.layout_hash(), data ? data->fingerprint() : 0,
                                  env.gang.node_rank, env.gang.nnodes);
    Ring ring = Ring::attach(env.ring, &geometry, &tag);
    Ledger ledger = Ledger::attach(env.ledger, want ? &*want : nullptr, &tag);
    StatusBoard status = StatusBoard::attach(env.status, &tag);
    auto ctx = std::make_unique<Context>(std::move(env), std::move(cfg), std::move(derived), std::move(ring),
                                         std::move(ledger), std::move(status), std::move(data));
    if (!ctx->cfg.data.eval_path.empty()) {
        const std::string board = EvalBoard::name_for_ring(ctx->env.ring);
        if (ctx->env.role == WorkerRole::Target) {
            ctx->eval_data = data::Dataset::load(ctx->cfg.resolve(ctx->cfg.data.eval_path),
                                                 data::dataset_options(ctx->cfg, ctx->derived));
            const auto& dist = ctx->cfg.distributed;
            ctx->eval = EvalBoard::attach(board, data::shard_size(ctx->eval_data->size(), dist.nnodes, dist.node_rank),
                                          ctx->eval_data->fingerprint());
        } else {
            ctx->eval = EvalBoard::attach(board);
        }
    }
    // Any worker's timed-out wait may reclaim a dead writer's slot: its samples go back to the
    // ledger, its held-out samples to the evaluation board.
    Context* c = ctx.get();
    ctx->ring.set_reclaim_hook([c](std::uint64_t ticket) {
        c->ledger.repend_ticket(ticket);
        if (c->eval) c->eval->repend_ticket(ticket);
    });
    ctx->ring.join(ctx->env.role == WorkerRole::Target ? Role::Writer : Role::Reader, ctx->env.incarnation, ctx->env.name);
    log::info("{} (pid {}, incarnation {}) attached to ring '{}' ({}) on {}", ctx->env.name, ::getpid(),
              ctx->env.incarnation, ctx->env.ring, ctx->ring.geometry().str(), ctx->env.cuda ? "cuda" : "cpu");
    return ctx;
}

void Context::publish(WorkerStats& s, bool force) {
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_publish_ < std::chrono::milliseconds(500)) return;
    last_publish_ = now;
    s.role = env.role == WorkerRole::Target ? 1 : 2;
    s.rank = env.rank;
    s.pid = ::getpid();
    s.incarnation = env.incarnation;
    status.publish(env.stats_index(), s);
}

} // namespace hsring::worker
