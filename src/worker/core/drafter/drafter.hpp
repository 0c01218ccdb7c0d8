#pragma once
// The drafter rank's loop as a class (the protocol: worker/core/drafter_loop.hpp). Its concepts live in
// files of their own:
//
//   drafter_loop.cpp         the rounds: gather + train, the statistics sum, the optimizer step
//                            (or a non-finite step skipped), when the run ends or stops
//   resume.cpp               the start: the resume step the gang agrees on, the master's state
//                            sent to every rank, the ledger's recovery
//   staging.cpp              which READY slots a rank takes (its plan slots, in plan order, and
//                            held-out slots), their samples consumed into the ledger and the train
//                            log, the in-flight pipeline
//   step_metrics.cpp         metrics.jsonl's line per logged step
//   checkpoint_protocol.*    checkpoints (collective, background writes, durable marks)
//   heldout_eval.*           held-out evaluation rounds
//   round_stats.*            what a round sums over the gang
#include "distributed/gang.hpp"
#include "hsring/slot_plan.hpp"
#include "hsring/train_log.hpp"
#include "worker/core/context.hpp"
#include "worker/core/drafter/checkpoint_protocol.hpp"
#include "worker/core/drafter/heldout_eval.hpp"
#include "worker/core/drafter/round_stats.hpp"
#include "worker/core/drafter_loop.hpp"
#include "worker/core/lr_schedule.hpp"
#include "hsring/metrics_file.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace hsring::worker {

using distributed::Gang;

// "1,5,9" — at most a dozen sample ids for a log line, then how many in all.
std::string id_list(const std::vector<std::uint64_t>& ids);

class Drafter {
public:
    Drafter(Context& ctx, DrafterCompute& compute, Gang& gang);
    int run();

private:
    using Clock = std::chrono::steady_clock;

    // A staged slot as the loop sees it (the compute holds the data, in the same order).
    struct StagedSlot {
        std::optional<std::uint64_t> plan_slot;  // a training slot's plan slot
        std::uint64_t ticket = 0;
        std::uint64_t samples = 0;  // kept (trained, or evaluated) samples
        std::uint64_t tokens = 0;   // their tokens
        std::vector<std::uint64_t> positions;  // its kept samples (ledger positions; held-out: board indices)
        std::vector<std::uint64_t> eval_ids;   // a held-out slot: its samples' indices in the held-out set
        bool eval() const { return !plan_slot; }
    };
    // What this rank trained in the current step (the warning of a skipped step names it).
    struct Trained {
        std::uint64_t plan_slot, ticket;
        std::vector<std::uint64_t> positions;
    };

    // resume.cpp
    // False when the run is complete already (every machine's ledger says so): nothing to do.
    bool restore();
    void recover_vanished_ranks(std::uint64_t step);
    // staging.cpp
    // Stages slots until plan slot j is at the front of the staged queue (held-out slots before it
    // are evaluated); false when j will not come because the run stops (it is not being written).
    bool stage_until(std::uint64_t j, RoundStats& r);
    // Takes what is READY and wanted now (this rank's next plan slots, held-out slots) up to the
    // in-flight limit; `last`: the last plan slot it may take (the current step's while stopping).
    void fill_pipeline(RoundStats& r, std::uint64_t last);
    void evaluate_front(RoundStats& r);
    void make_room(std::uint64_t j);
    bool stopping() const;
    // drafter_loop.cpp
    RoundStats gather_and_train(std::uint64_t step);
    void apply_step(const RoundStats& g, const RoundStats& local, double stats_ms);
    void skip_step(const RoundStats& g, const RoundStats& local, const char* why, double grad_norm, double stats_ms);
    void barrier();
    // The cosine's length in steps when the target writes the answers (after the plan's rebase).
    void retime_schedule();
    nlohmann::json checkpoint_state(bool finished) const;
    double seconds_since_start() const;
    // step_metrics.cpp
    void write_metrics(const RoundStats& g, const RoundStats& local, const StepResult& s, double lr, double stats_ms,
                       const char* skipped);

    Context& ctx_;
    DrafterCompute& compute_;
    Gang& gang_;
    const std::size_t positions_;
    TrainLog log_;
    std::optional<MetricsFile> metrics_;  // the master's
    CheckpointProtocol checkpoints_;
    HeldOutEval eval_;
    LrSchedule lr_;
    PlanSteps plan_;
    WorkerStats stats_;

    std::uint64_t step_ = 0;              // last optimizer step (applied, or skipped as non-finite)
    std::uint64_t tokens_done_ = 0;       // trained tokens of the whole gang up to step_
    std::uint64_t samples_done_ = 0;
    std::uint64_t warmup_end_tokens_ = 0; // tokens_done_ at the end of warmup
    std::uint64_t next_take_ = 0;         // the next plan slot of this rank to take from the ring
    std::uint32_t nonfinite_run_ = 0;     // steps in a row skipped as non-finite
    std::uint64_t nonfinite_total_ = 0;
    std::deque<StagedSlot> staged_;
    std::vector<Trained> trained_;        // this step's, this rank's
    Clock::time_point step_start_ = Clock::now();
    Clock::time_point run_start_ = Clock::now();
};

} // namespace hsring::worker
