#pragma once
// A drafter at decode time (speculative decoding, src/model/decode/spec_decode.cpp), of any type:
// its cached context per sequence (a row), and the drafts of one step. The loop owns the target,
// its cache, verification and acceptance; the drafter only proposes.
//
//   extend:  the target ran tokens at positions length(r).. of row r: their captured layers, and
//            for each the token that follows it (EAGLE-3 reads (layers at j, token j+1); DFlash
//            reads the layers alone).
//   draft:   row r's last accepted token is lasts[r] at position length(r) (not yet run by the
//            target); the drafter proposes ks[r] - 1 tokens for positions length(r)+1.., through
//            `pick` (greedy or sampled, the loop's rule).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

namespace hsring::model {

// Tokens of logits [rows * n, target vocab] (row-major: row i's draft j at i * n + j) for the
// drafts j0 .. j0 + n - 1 of each row. `greedy`: the loop's rule is argmax (the first of equal
// maxima, sample_tokens at temperature 0), so a drafter may pick on the device instead of calling
// it (EAGLE-3's chain then runs without a host round trip per draft).
struct PickDrafts {
    using Fn = std::function<std::vector<std::int64_t>(const at::Tensor& logits, std::int64_t j0, std::int64_t n)>;
    template <class F>
        requires std::is_invocable_r_v<std::vector<std::int64_t>, F&, const at::Tensor&, std::int64_t, std::int64_t>
    PickDrafts(F f, bool greedy_rule = false) : fn(std::move(f)), greedy(greedy_rule) {}
    std::vector<std::int64_t> operator()(const at::Tensor& logits, std::int64_t j0, std::int64_t n) const {
        return fn(logits, j0, n);
    }
    Fn fn;
    bool greedy;
};

class DecodeDrafter {
public:
    virtual ~DecodeDrafter() = default;
    // The target layers the loop captures for extend, in the order extend expects them.
    virtual const std::vector<int>& target_layer_ids() const = 0;
    // A verify step's tokens at most: the last accepted token + its drafts.
    virtual std::int64_t max_block() const = 0;
    // Empties the state and makes room for `rows` sequences.
    virtual void reset(std::int64_t rows) = 0;
    // captured [L, T, H]: counts[r] tokens of row r after another (packed); next_tokens [T] the token
    // after each.
    virtual void extend(const at::Tensor& captured, const std::vector<std::int64_t>& counts,
                        const std::vector<std::int64_t>& next_tokens) = 0;
    // Keeps only the given rows, in that order.
    virtual void keep_rows(const std::vector<std::int64_t>& rows) = 0;
    // Row r's drafts (ks[r] - 1 of them, 1 <= ks[r] <= max_block()), concatenated row after row.
    virtual std::vector<std::int64_t> draft(const std::vector<std::int64_t>& lasts, const std::vector<std::int64_t>& ks,
                                            const PickDrafts& pick) = 0;
    // Whether its draft steps ran as CUDA graphs (a decoder made with `graphs`, one row on a GPU,
    // no capture failed).
    virtual bool graphs_captured() const { return false; }
};

} // namespace hsring::model
