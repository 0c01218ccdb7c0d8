#pragma once
// The drafter rank's loop as a class (the protocol: worker/drafter_loop.hpp). Its concepts live in
// files of their own:
//
//   drafter_loop.cpp         the rounds: gather + train, the statistics sum, the optimizer step,
//                            when the run ends or stops
//   resume.cpp               the start: the resume step the gang agrees on, the master's state
//                            sent to every rank, the ledger's recovery
//   staging.cpp              which READY slots a rank takes, their samples consumed into the
//                            ledger and the train log, the in-flight pipeline
//   step_metrics.cpp         metrics.jsonl's line per logged step
//   checkpoint_protocol.*    checkpoints (collective, background writes, durable marks)
//   heldout_eval.*           held-out evaluation rounds
//   round_stats.*            what a round sums over the gang
#include "distributed/gang.hpp"
#include "hsring/train_log.hpp"
#include "worker/context.hpp"
#include "worker/drafter/checkpoint_protocol.hpp"
#include "worker/drafter/heldout_eval.hpp"
#include "worker/drafter/round_stats.hpp"
#include "worker/drafter_loop.hpp"
#include "worker/lr_schedule.hpp"
#include "worker/metrics.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace hsring::worker {

using distributed::Gang;

class Drafter {
public:
    Drafter(Context& ctx, DrafterCompute& compute, Gang& gang);
    int run();

private:
    using Clock = std::chrono::steady_clock;

    // A staged slot as the loop sees it (the compute holds the data, in the same order).
    struct StagedSlot {
        std::uint64_t samples = 0;  // kept (trained, or evaluated) samples
        std::uint64_t tokens = 0;   // their tokens
        bool eval = false;          // a held-out slot: evaluated, not trained
        std::vector<std::uint64_t> eval_ids;  // its samples' indices in the held-out set
    };

    // resume.cpp
    void restore();
    // staging.cpp
    bool next_training_batch(RoundStats& r);
    void fill_pipeline(RoundStats& r);
    void evaluate_front(RoundStats& r);
    bool exhausted() const;
    // drafter_loop.cpp
    RoundStats gather_and_train();
    void apply_step(const RoundStats& g, const RoundStats& local, double stats_ms);
    void barrier();
    nlohmann::json checkpoint_state() const;
    double seconds_since_start() const;
    // step_metrics.cpp
    void write_metrics(const RoundStats& g, const RoundStats& local, const StepResult& s, double lr, double stats_ms);

    Context& ctx_;
    DrafterCompute& compute_;
    Gang& gang_;
    const std::size_t positions_;
    TrainLog log_;
    std::optional<MetricsFile> metrics_;  // the master's
    CheckpointProtocol checkpoints_;
    HeldOutEval eval_;
    LrSchedule lr_;
    WorkerStats stats_;

    std::uint64_t step_ = 0;              // last applied optimizer step
    std::uint64_t tokens_done_ = 0;       // trained tokens of the whole gang up to step_
    std::uint64_t samples_done_ = 0;
    std::uint64_t warmup_end_tokens_ = 0; // tokens_done_ at the end of warmup
    std::uint64_t assign_step_ = 1;       // the step the next staged slot trains in
    std::uint32_t assigned_ = 0;          // slots already assigned to assign_step_
    std::deque<StagedSlot> staged_;
    bool gang_stopping_ = false;          // another rank stops: take no new slots
    Clock::time_point step_start_ = Clock::now();
    Clock::time_point run_start_ = Clock::now();
};

} // namespace hsring::worker
