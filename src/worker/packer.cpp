#include "worker/packer.hpp"

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
        const auto tok = eval_data.tokens(i);
        if (!fits(b, tok.size())) {
            board.untake(*idx, round, ticket);  // the next slot starts with it
            break;
        }
        const auto mask = eval_data.loss_mask(i);
        b.positions.push_back(*idx);
        b.lengths.push_back(static_cast<std::uint32_t>(tok.size()));
        b.tokens.insert(b.tokens.end(), tok.begin(), tok.end());
        b.loss_mask.insert(b.loss_mask.end(), mask.begin(), mask.end());
    }
    if (b.positions.empty()) b.eval_round = 0;
    return b;
}

PackedBatch Packer::pack(std::uint64_t ticket) {
    PackedBatch b;
    while (b.positions.size() < max_samples_) {
        auto pos = ledger_.take(ticket);
        if (!pos) break;
        const std::uint32_t i = sample_of(*pos);
        const auto tok = data_.tokens(i);
        if (b.tokens.size() + tok.size() > slot_tokens_) {
            ledger_.untake(*pos, ticket);  // the next slot starts with it
            break;
        }
        const auto mask = data_.loss_mask(i);
        b.positions.push_back(*pos);
        b.lengths.push_back(static_cast<std::uint32_t>(tok.size()));
        b.tokens.insert(b.tokens.end(), tok.begin(), tok.end());
        b.loss_mask.insert(b.loss_mask.end(), mask.begin(), mask.end());
    }
    return b;
}

void write_meta(SlotMeta meta, const PackedBatch& b, std::uint32_t writer_rank) {
    const auto n = static_cast<std::uint32_t>(b.positions.size());
    meta.set_writer_rank(writer_rank);
    meta.set_counts(n, b.n_tokens());
    meta.user()[0] = b.eval_round;
    std::copy(b.positions.begin(), b.positions.end(), meta.sample_ids().begin());
    std::copy(b.lengths.begin(), b.lengths.end(), meta.seq_lens().begin());
    std::copy(b.tokens.begin(), b.tokens.end(), meta.token_ids().begin());
    std::copy(b.loss_mask.begin(), b.loss_mask.end(), meta.loss_mask().begin());
}

PackedBatch read_meta(const SlotMeta& cmeta) {
    SlotMeta meta = cmeta;
    PackedBatch b;
    const std::uint32_t n = meta.n_samples();
    const std::uint64_t t = meta.n_tokens();
    b.eval_round = static_cast<std::uint32_t>(meta.user()[0]);
    b.positions.assign(meta.sample_ids().begin(), meta.sample_ids().begin() + n);
    b.lengths.assign(meta.seq_lens().begin(), meta.seq_lens().begin() + n);
    b.tokens.assign(meta.token_ids().begin(), meta.token_ids().begin() + static_cast<std::ptrdiff_t>(t));
    b.loss_mask.assign(meta.loss_mask().begin(), meta.loss_mask().begin() + static_cast<std::ptrdiff_t>(t));
    return b;
}

} // namespace hsring::worker
