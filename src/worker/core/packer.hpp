#pragma once
// What goes into one slot. Training slots follow the packer's plan (hsring/slot_plan.hpp): a
// target takes a PENDING plan slot from the ledger under its ring slot's ticket and writes exactly
// that plan slot's samples, so a slot produced again after a death holds the same samples.
// Held-out slots ([data] eval_path) are packed from the evaluation board. The batch's tokens, loss
// mask, sample boundaries and flags travel in the slot's metadata, so a drafter needs no data set.
#include "hsring/dataset.hpp"
#include "hsring/eval_board.hpp"
#include "hsring/ledger.hpp"
#include "hsring/ring.hpp"

#include <cstdint>
#include <optional>
#include <vector>

namespace hsring::worker {

// PackedBatch::flags bits.
namespace sample_flag {
inline constexpr std::uint8_t kRejected = 1;  // the target found its hidden states non-finite: never trained
} // namespace sample_flag

struct PackedBatch {
    // Training slot: ledger positions (this machine's share, epoch by epoch). Evaluation slot
    // (eval_round > 0): indices on the evaluation board (this machine's share of the held-out set).
    std::vector<std::uint64_t> positions;
    std::uint32_t eval_round = 0;
    std::optional<std::uint64_t> plan_slot;  // a training slot's plan slot
    std::vector<std::uint32_t> lengths;    // tokens per sample
    std::vector<std::uint8_t> flags;       // per sample (sample_flag)
    std::vector<std::int32_t> tokens;      // all samples back to back
    std::vector<std::uint8_t> loss_mask;
    // Per sample, not in the slot's metadata: its data-set index | epoch << 32 (held-out:
    // | kEvalKey), what a target's answer is drawn from ([data] responses = "target").
    std::vector<std::uint64_t> keys;
    static constexpr std::uint64_t kEvalKey = 0xFFFF'FFFFull << 32;

    bool empty() const { return positions.empty(); }
    std::uint64_t n_tokens() const { return tokens.size(); }
    std::vector<std::int64_t> cu_seqlens() const;  // [0, l0, l0+l1, ...]
    bool rejected(std::size_t i) const { return (flags[i] & sample_flag::kRejected) != 0; }
};

class Packer {
public:
    Packer(const data::Dataset& data, Ledger& ledger, std::uint64_t slot_tokens, std::uint32_t max_samples);

    // The next plan slot for `ticket` (the lowest PENDING one below `end`, ledger.take_slot);
    // an empty batch when none is PENDING there now.
    PackedBatch pack(std::uint64_t ticket, std::uint64_t end);
    // Held-out samples of the evaluation round the drafters asked for ([data] eval_path), for
    // `ticket`; empty when no round is open or every sample of it is taken.
    PackedBatch pack_eval(EvalBoard& board, const data::Dataset& eval_data, std::uint64_t ticket);
    // The data-set index behind a ledger position.
    std::uint32_t sample_of(std::uint64_t pos);

private:
    const data::Dataset& data_;
    Ledger& ledger_;
    std::uint64_t slot_tokens_;
    std::uint32_t max_samples_;
    data::ShardOrder order_;  // this machine's share of each epoch
    std::uint32_t nnodes_ = 1, node_ = 0;

    bool fits(const PackedBatch& b, std::size_t tokens) const;
    void append(PackedBatch& b, std::uint64_t id, const data::Dataset& d, std::size_t sample, std::uint8_t flags,
                std::uint64_t key) const;
};

// The batch's samples, tokens, mask and flags into a claimed slot's metadata (counts included; the
// evaluation round, 0 for a training slot, in the first application word; the plan slot + 1, 0 for
// none, in the second).
void write_meta(SlotMeta meta, const PackedBatch& b, std::uint32_t writer_rank);
// And back, on the reading side.
PackedBatch read_meta(const SlotMeta& meta);
// A READY slot's plan slot without reading the rest (a reader's filter).
std::optional<std::uint64_t> plan_slot_of(const SlotMeta& meta);

} // namespace hsring::worker
