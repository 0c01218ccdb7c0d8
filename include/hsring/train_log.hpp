#pragma once
// The drafter's train log: an append-only text file that says which ledger positions went into
// which optimizer step of which incarnation. It is the durable record behind the shared-memory
// ledger, and the independent evidence for `hsring ledger verify`:
//
//   R <incarnation> <step>         an incarnation started from the checkpoint of <step> (0: none)
//   T <incarnation> <step> <pos>   position <pos> was trained into optimizer step <step>
//   K <incarnation> <step>         a checkpoint of <step> was committed
//
// A record (T inc s pos) is in the final weights iff s <= the final checkpoint's step and
// s <= the resume step of every later incarnation (weights after a checkpoint die with the
// process that made them). T records for steps <= S are synced before checkpoint S commits.
#include "hsring/ledger.hpp"

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
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
    void checkpoint(std::uint32_t incarnation, std::uint64_t step);
    // Writes what is buffered and fdatasyncs. Called before a checkpoint commits.
    void sync();

private:
    void flush();
    std::filesystem::path path_;
    int fd_ = -1;
    std::string buffer_;
};

struct EpochReport {
    std::uint64_t total = 0, exactly_once = 0, missing = 0, more_than_once = 0;
};
struct LineageReport {
    std::uint64_t final_step = 0;
    std::uint32_t incarnations = 0;
    std::uint64_t records = 0, surviving = 0;
    std::vector<EpochReport> epochs;
    bool ok() const;
};

// Positions in the weights of the checkpoint of `final_step` (with multiplicity).
std::vector<std::uint64_t> surviving_positions(const std::filesystem::path& log, std::uint64_t final_step,
                                               LineageReport* report = nullptr);
// Per-epoch exactly-once report for a ledger of `info`.
LineageReport verify_lineage(const std::filesystem::path& log, std::uint64_t final_step, const LedgerInfo& info);

} // namespace hsring
