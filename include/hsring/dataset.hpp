#pragma once
// The training data: pre-tokenized JSONL, one sample per line (no torch, no Python):
//
//   {"input_ids": [151644, 872, 198, ...], "loss_mask": [0, 0, 0, ..., 1, 1]}
//
// `loss_mask` is optional (absent = all ones: every token is trained); other keys are ignored.
// This is the shape of preprocessed SpecForge / ModelOpt data sets; bin/prepare-data writes it
// from chat JSONL.
//
// A loaded data set is immutable and lives in three flat arrays, so millions of samples cost
// no per-sample allocation:
//
//   tokens_  | s0 tok ... | s1 tok ...... | s2 ... |     int32, all samples back to back
//   mask_    | s0 0/1 ... | s1 0/1 ...... | s2 ... |     uint8, same positions as tokens_
//   offsets_ 0           o1              o2       o3   sample i = [offsets_[i], offsets_[i+1])
//
// Thread safety: load() is a pure function; a loaded Dataset is read-only and safe to share
// between threads.
#include "hsring/on_bad_line.hpp"

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hsring::data {

struct DatasetOptions {
    OnBadLine on_bad_line = OnBadLine::Fail;
    std::uint64_t max_seq_len = 0;  // longer samples are truncated; 0 = no limit
    std::int64_t vocab_size = 0;    // tokens must be < vocab_size; 0 = only "fits in int32"
    // [data] responses = "target": > 0 turns every sample into a response template (below) with
    // room for this many generated tokens per answer ([generate] max_new_tokens).
    std::uint64_t response_tokens = 0;
    // A token id no sample may hold (>= 0): DFlash's mask token, which marks the slots a block
    // drafts; a sample holding it is a bad line (not part of the fingerprint: it only refuses).
    std::int64_t reserved_token = -1;
};

// Response templates ([data] responses = "target"). The target writes the answers, so a sample
// keeps its context (loss_mask 0: system, user turns) and each of its answers (a run of
// loss_mask 1) becomes a room of `response_tokens` tokens (id 0, loss_mask 1) that the target
// fills with what it generates from everything before it (worker/core/responses.hpp), and the length
// the packer's plan counts (an answer never outgrows it). A line without loss_mask is one prompt
// with one answer after it. Truncation to max_seq_len then cuts the template like any sample.
//
//   data set line   | system user | answer ..... | user | answer .. |
//   template        | system user | 0 0 0 ... 0  | user | 0 0 ... 0 |     each answer: response_tokens
//   loss mask       | 0 ...     0 | 1 1 1 ... 1  | 0  0 | 1 1 ... 1 |

// What loading left out or changed, for the log and `hsring` reports.
struct LoadReport {
    static constexpr std::size_t kMaxReasons = 10;

    std::uint64_t lines = 0;                // lines read (blank lines included, not samples)
    std::uint64_t skipped = 0;              // bad lines skipped (on_bad_line = skip)
    std::vector<std::string> skip_reasons;  // the first kMaxReasons: "FILE:LINE: reason"
    std::uint64_t truncated = 0;            // samples cut to max_seq_len
    std::uint64_t no_loss = 0;              // samples without any loss-masked token (train nothing)
};

class Dataset {
public:
    // Reads and validates a JSONL file. A bad line throws hsring::Error "FILE:LINE: reason" (fail)
    // or is logged, counted and left out (skip); a data set with no sample left is an error.
    static Dataset load(const std::filesystem::path& file, const DatasetOptions& options);
    // The same from text in memory; `source` names it in messages (tests, tools).
    static Dataset parse(std::string_view text, std::string_view source, const DatasetOptions& options);

    Dataset(Dataset&&) noexcept = default;
    Dataset& operator=(Dataset&&) noexcept = default;
    Dataset(const Dataset&) = delete;  // gigabytes: copy only on purpose
    Dataset& operator=(const Dataset&) = delete;

    std::size_t size() const { return offsets_.empty() ? 0 : offsets_.size() - 1; }  // 0 once moved from
    std::size_t length(std::size_t i) const { return offsets_[i + 1] - offsets_[i]; }
    std::span<const std::int32_t> tokens(std::size_t i) const {
        return {tokens_.data() + offsets_[i], length(i)};
    }
    std::span<const std::uint8_t> loss_mask(std::size_t i) const {
        return {mask_.data() + offsets_[i], length(i)};
    }
    std::uint64_t total_tokens() const { return tokens_.size(); }
    std::uint64_t loss_tokens() const { return loss_tokens_; }
    std::size_t max_length() const { return max_length_; }

    // 64-bit hash of the samples (tokens, masks, boundaries) and the options; the same on every
    // machine. A run records it so that re-attaching to a different data set is refused.
    // The file's path and name do not enter it: a moved file is still the same data.
    std::uint64_t fingerprint() const { return fingerprint_; }

    const std::string& source() const { return source_; }
    const LoadReport& report() const { return report_; }

private:
    Dataset() = default;

    std::string source_;
    std::vector<std::int32_t> tokens_;
    std::vector<std::uint8_t> mask_;
    std::vector<std::uint64_t> offsets_{0};
    std::uint64_t loss_tokens_ = 0;
    std::size_t max_length_ = 0;
    std::uint64_t fingerprint_ = 0;
    LoadReport report_;
};

// The order in which an epoch visits samples 0..n-1: a permutation that depends only on
// (n, seed, epoch), the same on every machine, compiler and process (std::shuffle differs
// between standard libraries). shuffle = false: 0, 1, 2, ...
// Algorithm (reproducible elsewhere, e.g. in Python): a splitmix64 stream started at
// mix64(seed) ^ mix64(0x45504f4348 + epoch); Fisher-Yates from the back, j = below(i + 1) with
// Lemire's multiply-and-reject bounded draw (src/data/splitmix.hpp).
std::vector<std::uint32_t> epoch_order(std::size_t n, std::uint64_t seed, std::uint32_t epoch,
                                       bool shuffle);

// The data set partitioned between machines (invariant 9, docs/architecture.md): machine `node` of `nnodes`
// takes entries node, node + nnodes, node + 2 nnodes, ... of each epoch's order, so every machine
// gets a share of every epoch and the shares differ by at most one sample.
constexpr std::uint64_t shard_size(std::uint64_t n, std::uint32_t nnodes, std::uint32_t node) {
    return n / nnodes + (node < n % nnodes ? 1 : 0);
}

// Ledger position -> data-set sample on one machine. Positions of a machine's ledger run over its
// share: position p is entry p % share of epoch p / share (share = shard_size(...)), which is
// entry node + (p % share) * nnodes of that epoch's order. Keeps the orders of the epochs it was
// asked about last (targets move forward through the epochs).
class ShardOrder {
public:
    ShardOrder(std::uint64_t dataset_samples, std::uint64_t seed, bool shuffle, std::uint32_t nnodes = 1,
               std::uint32_t node = 0);
    std::uint64_t share() const { return share_; }
    std::uint32_t epoch_of(std::uint64_t pos) const { return static_cast<std::uint32_t>(pos / share_); }
    std::uint32_t sample_of(std::uint64_t pos);

private:
    std::uint64_t n_, seed_;
    bool shuffle_;
    std::uint32_t nnodes_, node_;
    std::uint64_t share_;
    std::vector<std::pair<std::uint32_t, std::vector<std::uint32_t>>> cache_;  // (epoch, order), newest last
};

} // namespace hsring::data
