#include "worker/core/packer.hpp"

#include "hsring/error.hpp"

#include <algorithm>

namespace hsring::worker {

std::vector<std::int64_t> PackedBatch::cu_seqlens() const {
    std::vector<std::int64_t> cu{0};
    for (std::uint32_t l : lengths) cu.push_back(cu.back() + l);
    return cu;
}

Packer::Packer(const data::Dataset& data, Ledger& ledger, std::uint64_t slot_tokens, std::uint32_t max_samples)
    : data_(data), ledger_(ledger), slot_tokens_(slot_tokens), max_samples_(max_samples),
      order_(data.size(), ledger.info().seed, ledger.info().shuffle, ledger.info().nnodes, ledger.info().node_rank),
      nnodes_(ledger.info().nnodes), node_(ledger.info().node_rank) {
    if (ledger.info().dataset_samples != data.size() || order_.share() != ledger.info().samples)
        fail("the ledger has {} samples per epoch (machine {} of {}) but the data set {} has {}: the run's ring "
             "belongs to other data", ledger.info().samples, ledger.info().node_rank, ledger.info().nnodes,
             data.source(), data.size());
}

std::uint32_t Packer::sample_of(std::uint64_t pos) { return order_.sample_of(pos); }

bool Packer::fits(const PackedBatch& b, std::size_t tokens) const {
    return b.positions.size() < max_samples_ && b.tokens.size() + tokens <= slot_tokens_;
}

void Packer::append(PackedBatch& b, std::uint64_t id, const data::Dataset& d, std::size_t i, std::uint8_t flags,
                    std::uint64_t key) const {
    const auto tok = d.tokens(i);
    const auto mask = d.loss_mask(i);
    b.positions.push_back(id);
    b.lengths.push_back(static_cast<std::uint32_t>(tok.size()));
    b.flags.push_back(flags);
    b.keys.push_back(key);
    b.tokens.insert(b.tokens.end(), tok.begin(), tok.end());
    b.loss_mask.insert(b.loss_mask.end(), mask.begin(), mask.end());
}

PackedBatch Packer::pack_eval(EvalBoard& board, const data::Dataset& eval_data, std::uint64_t ticket) {
    PackedBatch b;
    const std::uint32_t round = board.round();
    if (round == 0) return b;
    b.eval_round = round;
    while (b.positions.size() < max_samples_) {
        auto idx = board.take(round, ticket);
        if (!idx) break;
        // Board index -> held-out sample: this machine's share, in file order.
        const std::size_t i = node_ + *idx * nnodes_;
        if (!fits(b, eval_data.length(i))) {
            board.untake(*idx, round, ticket);  // the next slot starts with it
            break;
        }
        append(b, *idx, eval_data, i, 0, i | PackedBatch::kEvalKey);
    }
    if (b.positions.empty()) b.eval_round = 0;
    return b;
}

PackedBatch Packer::pack(std::uint64_t ticket, std::uint64_t end) {
    PackedBatch b;
    const auto j = ledger_.take_slot(ticket, end);
    if (!j) return b;
    b.plan_slot = *j;
    // Every sample of the plan slot, also one rejected earlier (produced again, flagged again):
    // the batch is the plan's, whatever happened to it before.
    for (std::uint64_t pos = ledger_.first(*j); pos < ledger_.first(*j + 1); ++pos) {
        const std::uint8_t flags = ledger_.state(pos) == EntryState::Rejected ? sample_flag::kRejected : 0;
        const std::uint32_t sample = sample_of(pos);
        append(b, pos, data_, sample, flags, sample | std::uint64_t{ledger_.epoch_of(pos)} << 32);
    }
    HSRING_ASSERT(b.tokens.size() <= slot_tokens_ && b.positions.size() <= max_samples_,
                  "plan slot {} ({} samples, {} tokens) exceeds a ring slot", *j, b.positions.size(), b.tokens.size());
    return b;
}

void write_meta(SlotMeta meta, const PackedBatch& b, std::uint32_t writer_rank) {
    const auto n = static_cast<std::uint32_t>(b.positions.size());
    meta.set_writer_rank(writer_rank);
    meta.set_counts(n, b.n_tokens());
    meta.user()[0] = b.eval_round;
    meta.user()[1] = b.plan_slot ? *b.plan_slot + 1 : 0;
    std::copy(b.positions.begin(), b.positions.end(), meta.sample_ids().begin());
    std::copy(b.lengths.begin(), b.lengths.end(), meta.seq_lens().begin());
    std::copy(b.flags.begin(), b.flags.end(), meta.sample_flags().begin());
    std::copy(b.tokens.begin(), b.tokens.end(), meta.token_ids().begin());
    std::copy(b.loss_mask.begin(), b.loss_mask.end(), meta.loss_mask().begin());
}

std::optional<std::uint64_t> plan_slot_of(const SlotMeta& cmeta) {
    SlotMeta meta = cmeta;
    const std::uint64_t w = meta.user()[1];
    if (meta.user()[0] != 0 || w == 0) return std::nullopt;
    return w - 1;
}

PackedBatch read_meta(const SlotMeta& cmeta) {
    SlotMeta meta = cmeta;
    PackedBatch b;
    const std::uint32_t n = meta.n_samples();
    const std::uint64_t t = meta.n_tokens();
    b.eval_round = static_cast<std::uint32_t>(meta.user()[0]);
    b.plan_slot = plan_slot_of(meta);
    b.positions.assign(meta.sample_ids().begin(), meta.sample_ids().begin() + n);
    b.lengths.assign(meta.seq_lens().begin(), meta.seq_lens().begin() + n);
    b.flags.assign(meta.sample_flags().begin(), meta.sample_flags().begin() + n);
    b.tokens.assign(meta.token_ids().begin(), meta.token_ids().begin() + static_cast<std::ptrdiff_t>(t));
    b.loss_mask.assign(meta.loss_mask().begin(), meta.loss_mask().begin() + static_cast<std::ptrdiff_t>(t));
    return b;
}

} // namespace hsring::worker
