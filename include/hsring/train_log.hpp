#pragma once
// The drafter's train log: an append-only text file that says which ledger positions went into
// which optimizer step of which incarnation. It is the durable record behind the shared-memory
// ledger, and the independent evidence for `hsring ledger verify`:
//
//   R <incarnation> <step>         an incarnation started from the checkpoint of <step> (0: none)
//   T <incarnation> <step> <pos>   position <pos> was trained into optimizer step <step>
//   X <incarnation> <step> <pos>   position <pos> came in a slot of step <step> rejected by its
//                                  target (non-finite hidden states): seen, never trained
//   K <incarnation> <step>         a checkpoint of <step> was committed
//
// A record (T or X inc s pos) is in the final weights iff s <= the final checkpoint's step and
// s <= the resume step of every later incarnation (weights after a checkpoint die with the
// process that made them). T and X records for steps <= S are synced before checkpoint S commits.
#include "hsring/dataset.hpp"
#include "hsring/ledger.hpp"

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace hsring {

class TrainLog {
public:
    // Opens for appending; a torn last line (the writer died mid-line) is terminated first.
    explicit TrainLog(const std::filesystem::path& file);
    ~TrainLog();
    TrainLog(const TrainLog&) = delete;
    TrainLog& operator=(const TrainLog&) = delete;

    void resume(std::uint32_t incarnation, std::uint64_t step);
    void trained(std::uint32_t incarnation, std::uint64_t step, std::span<const std::uint64_t> positions);
    void rejected(std::uint32_t incarnation, std::uint64_t step, std::span<const std::uint64_t> positions);
    void checkpoint(std::uint32_t incarnation, std::uint64_t step);
    // Writes what is buffered and fdatasyncs. Called before a checkpoint commits.
    void sync();

private:
    void flush();
    std::filesystem::path path_;
    int fd_ = -1;
    std::string buffer_;
};

// RUN_DIR/train-log.<rank>.txt: drafter `rank`'s log on its machine.
std::filesystem::path train_log_path(const std::filesystem::path& run_dir, std::uint32_t rank);
// Every train log in a run directory, by rank: each rank that ever trained there, also those of an
// earlier run with more drafters on this machine (their records before the resume still count).
std::vector<std::pair<std::uint32_t, std::filesystem::path>> train_logs_in(const std::filesystem::path& run_dir);

// Per epoch: every sample is trained exactly once, or rejected (seen once, never trained); the
// rest is missing or more than once.
struct EpochReport {
    std::uint64_t total = 0, exactly_once = 0, rejected = 0, missing = 0, more_than_once = 0;
};
struct LineageReport {
    std::uint64_t final_step = 0;
    std::uint32_t incarnations = 0;
    std::uint64_t records = 0, surviving = 0;
    std::vector<EpochReport> epochs;
    bool ok() const;
    std::uint64_t missing() const;  // over every epoch
    std::uint64_t doubled() const;  // samples trained more than once
    std::uint64_t rejected() const;  // samples rejected (never trained)
};

// The records of drafter `rank`'s log that are in the weights of the checkpoint of `final_step`
// (with multiplicity), as (position, rank, step, rejected). Counts go to `report` when given.
std::vector<Ledger::Trained> surviving_records(const std::filesystem::path& log, std::uint32_t rank,
                                               std::uint64_t final_step, LineageReport* report = nullptr);

// One drafter's log and the machine it ran on (its ledger positions -> data-set samples).
struct LogOfMachine {
    std::filesystem::path log;
    std::uint32_t rank = 0;        // local rank on its machine
    std::uint32_t nnodes = 1, node_rank = 0;
};

// Per-epoch exactly-once report over every drafter of every machine of a run: each surviving
// record's position is mapped to (epoch, sample of the whole data set) with data::ShardOrder and
// counted; every sample of every epoch must be counted once.
LineageReport verify_lineage(const std::vector<LogOfMachine>& logs, std::uint64_t final_step,
                             std::uint64_t dataset_samples, std::uint32_t epochs, std::uint64_t seed, bool shuffle);
// One machine's share of a run in ledger positions (epoch-major, `share` per epoch): every
// position of its drafter ranks' logs (`logs[r]` = rank r's) counted against the weights of the
// checkpoint of `final_step`. What a supervisor checks before it reports its run complete.
LineageReport verify_positions(const std::vector<std::filesystem::path>& logs, std::uint64_t final_step,
                               std::uint64_t share, std::uint32_t epochs);
// The single-machine, single-drafter case (rank 0's log against its ledger's facts).
LineageReport verify_lineage(const std::filesystem::path& log, std::uint64_t final_step, const LedgerInfo& info);

} // namespace hsring
