// tau during training, measured by target.0 (see worker/torch/spec_probe.hpp).
#include "worker/torch/spec_probe.hpp"

#include "hsring/acceptance.hpp"
#include "hsring/error.hpp"
#include "hsring/log.hpp"
#include "hsring/stop_tokens.hpp"
#include "model/drafter/registry/registry.hpp"
#include "model/decode/prompts.hpp"
#include "model/decode/spec_decode.hpp"
#include "worker/core/checkpoint_store.hpp"
#include "hsring/metrics_file.hpp"
#include "hsring/wall_clock.hpp"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <optional>

namespace hsring::worker {

namespace {

// On a GPU that a drafter shares (allow_shared_gpus), every second target.0 spends decoding is
// taken from the drafter's steps (time-sliced contexts). The probe decodes at most this share of
// the wall clock there: after a measurement of d seconds the next waits d * (1 / share - 1), so the
// drafter's cost is at most the share times its slowdown while decoding (BENCHMARKS.md: tau
// during training). On a GPU of its own the target decodes whenever the ring lets it.
constexpr double kSharedGpuShare = 0.05;

// A tau row: tau = the mean acceptance length (accepted drafts + 1 per verify step).
// `windows`: when target.0 was decoding ([begin, end] wall-clock seconds), so the
// drafter steps that shared the GPU with it can be told apart (bench/gpu/target_speaks.sh).
nlohmann::json spec_row(std::uint64_t step, const std::vector<std::int64_t>& lengths, std::uint32_t block,
                        std::size_t prompts, std::int64_t new_tokens, double seconds,
                        const std::vector<std::array<double, 2>>& windows) {
    double sum = 0;
    for (std::int64_t a : lengths) sum += double(a);
    return {{"step", step},
            {"spec",
             {{"tau", lengths.empty() ? 0.0 : sum / double(lengths.size())},
              {"acceptance_per_position", acceptance_per_position(lengths, block)},
              {"step", step},
              {"prompts", prompts},
              {"verify_steps", lengths.size()},
              {"new_tokens", new_tokens},
              {"seconds", seconds},
              {"final", false}}},
            {"windows", windows}};
}

} // namespace

struct SpecProbe::Impl {
    Context& ctx;
    model::TargetModel& target;
    std::vector<model::GenerateRequest> prompts;
    model::SpecDecodeOptions options;
    std::uint64_t next_due = 0;
    MetricsFile metrics;
    double share = 1.0;  // of the wall clock this probe may decode (kSharedGpuShare on a shared GPU)
    std::chrono::steady_clock::time_point not_before{};

    // The measurement due: the checkpoint's drafter, loaded at one slot and decoded at a later one.
    struct Run {
        std::uint64_t step = 0;
        std::unique_ptr<model::TrainableDrafter> drafter;  // of the run's [drafter] type
    };
    std::optional<Run> run;

    Impl(Context& c, model::TargetModel& t)
        : ctx(c), target(t), metrics(c.env.run_dir / "metrics.jsonl", c.env.run_dir / "tensorboard" / "spec") {
        const EvalConfig& e = c.cfg.eval;
        prompts = model::read_prompts(c.cfg.resolve(e.spec_prompts), c.derived.target.source, c.derived.target, 0);
        if (e.spec_samples > 0 && e.spec_samples < prompts.size()) prompts.resize(e.spec_samples);
        options.max_new_tokens = static_cast<std::int64_t>(e.spec_max_new_tokens);
        options.stop_tokens = model_stop_tokens(c.derived.target);  // as served (and as spec-decode measures)
        options.batch = static_cast<std::int64_t>(std::max<std::size_t>(prompts.size(), 1));
        options.decode_graphs = false;  // a batch: its last row alone would capture graphs each time
        const std::uint64_t latest = CheckpointStore::read_latest(c.env.run_dir / "checkpoints");
        next_due = (latest / e.spec_every + 1) * e.spec_every;  // a restarted target skips what was measured
        const Place here = c.cfg.topology.targets.at(c.env.rank);
        for (const Place& d : c.cfg.topology.drafters)
            if (!here.is_cpu() && d == here) share = kSharedGpuShare;
        log::info("tau during training: {} prompts of {}, every {} steps (next: the first checkpoint at or after "
                  "step {}){}", prompts.size(), e.spec_prompts.string(), e.spec_every, next_due,
                  share < 1.0 ? fmt::format("; {} is shared with a drafter: decoding at most {:.0f}% of the time",
                                            here.str(), 100 * share)
                              : "");
    }

    void start() {
        std::uint64_t latest = 0;
        try {
            latest = CheckpointStore::read_latest(ctx.env.run_dir / "checkpoints");
        } catch (const Error&) {
            return;  // being replaced; looked at again after the next slot
        }
        if (latest < next_due) return;
        next_due = (latest / ctx.cfg.eval.spec_every + 1) * ctx.cfg.eval.spec_every;
        const auto dir = ctx.env.run_dir / "checkpoints" / fmt::format("step-{:08}", latest) / "drafter";
        try {
            auto drafter = model::load_drafter(dir, target.device());
            if (const std::string why = drafter->misfit(target.shape()); !why.empty())
                fail("{}: {}", (dir / "config.json").string(), why);
            drafter->module().eval();
            run.emplace();
            run->step = latest;
            run->drafter = std::move(drafter);
        } catch (const std::exception& e) {
            // Pruned while we read it (two newer checkpoints came): the next one is measured.
            log::warn("tau at step {} not measured: {}", latest, e.what());
        }
    }

    // Every prompt as a row of one batched spec-decode: one measurement costs about one prompt's
    // decoding time (each row's own acceptance lengths, as decoded alone).
    void step() {
        const double begin = unix_seconds();
        const auto t0 = std::chrono::steady_clock::now();
        const auto res = model::spec_decode(target, *run->drafter, prompts, options);
        const auto t1 = std::chrono::steady_clock::now();
        const double seconds = std::chrono::duration<double>(t1 - t0).count();
        not_before = t1 + std::chrono::duration_cast<std::chrono::steady_clock::duration>((t1 - t0) * (1.0 / share - 1.0));
        std::vector<std::int64_t> lengths;
        for (const auto& out : res.outputs)
            lengths.insert(lengths.end(), out.acceptance_lengths.begin(), out.acceptance_lengths.end());
        const auto row = spec_row(run->step, lengths, static_cast<std::uint32_t>(res.block), prompts.size(),
                                  res.stats.new_tokens, seconds, {{begin, unix_seconds()}});
        metrics.append(row);
        log::info("tau {:.3f} at step {} ({} prompts in one batch, {} verify steps, {:.1f} s of decoding)",
                  row["spec"]["tau"].get<double>(), run->step, prompts.size(), lengths.size(), seconds);
        run.reset();
    }
};

SpecProbe::SpecProbe(Context& ctx, model::TargetModel& target) {
    const EvalConfig& e = ctx.cfg.eval;
    if (e.spec_prompts.empty() || e.spec_every == 0 || ctx.env.rank != 0 || ctx.cfg.distributed.node_rank != 0) return;
    impl_ = std::make_unique<Impl>(ctx, target);
}

SpecProbe::~SpecProbe() = default;

void SpecProbe::work() {
    if (!impl_ || std::chrono::steady_clock::now() < impl_->not_before) return;
    if (!impl_->run) impl_->start();
    if (impl_->run) impl_->step();
}

} // namespace hsring::worker
