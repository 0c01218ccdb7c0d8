#pragma once
// Packing samples into one slot: a target takes PENDING ledger positions under its slot's
// ticket until the next sample would not fit the slot's token budget (or sample count), and
// gives that one back. The batch's tokens, loss mask and sample boundaries travel in the slot's
// metadata, so a drafter needs no data set.
#include "hsring/dataset.hpp"
#include "hsring/eval_board.hpp"
#include "hsring/ledger.hpp"
#include "hsring/ring.hpp"

#include <cstdint>
#include <vector>

namespace hsring::worker {

struct PackedBatch {
    // Training slot: ledger positions (this machine's share, epoch by epoch). Evaluation slot
    // (eval_round > 0): indices on the evaluation board (this machine's share of the held-out set).
    std::vector<std::uint64_t> positions;
    std::uint32_t eval_round = 0;
    std::vector<std::uint32_t> lengths;    // tokens per sample
    std::vector<std::int32_t> tokens;      // all samples back to back
    std::vector<std::uint8_t> loss_mask;

    bool empty() const { return positions.empty(); }
    std::uint64_t n_tokens() const { return tokens.size(); }
    std::vector<std::int64_t> cu_seqlens() const;  // [0, l0, l0+l1, ...]
};

class Packer {
public:
    Packer(const data::Dataset& data, Ledger& ledger, std::uint64_t slot_tokens, std::uint32_t max_samples);

    // Takes samples for `ticket`; an empty batch means nothing is PENDING right now.
    PackedBatch pack(std::uint64_t ticket);
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

    // Appends sample `tokens`/`mask` unless it would overflow the slot.
    bool fits(const PackedBatch& b, std::size_t tokens) const;
};

// The batch's samples, tokens and mask into a claimed slot's metadata (counts included; the
// evaluation round, 0 for a training slot, in the first application word).
void write_meta(SlotMeta meta, const PackedBatch& b, std::uint32_t writer_rank);
// And back, on the reading side.
PackedBatch read_meta(const SlotMeta& meta);

} // namespace hsring::worker
