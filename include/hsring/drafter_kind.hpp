#pragma once
// A drafter type's torch-free half: what the config reader, `derive`, `hsring config check`, the
// planner and the workers need of a type without LibTorch. Each type defines its own in its folder
// (src/model/drafter/<type>/kind.cpp, compiled into hsring_config, no torch); the table in
// src/config/drafter_kinds.cpp lists them, one line each. The torch half (module, loss, export,
// decoding) is src/model/drafter/registry's table.
#include "hsring/config.hpp"

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hsring {

// What `hsring config check` says of the drafter: the captured layers, the drafter, its training.
struct DrafterLines {
    std::string captured, drafter, train;
};

struct DrafterKind {
    std::string_view type;  // [drafter] type
    // Drafts blocks of a mask token: derive needs one, and the data set may not hold it.
    bool drafts_with_mask_token = false;
    // Drafts over a vocabulary of the data's most frequent tokens ([drafter] draft_vocab): a fresh
    // drafter counts the data set's tokens.
    bool has_draft_vocab = false;
    // [train] recompute and loss_chunk apply to it (the planner may suggest them).
    bool has_recompute_and_loss_chunk = false;
    // Checks the keys the type constrains ([drafter], [target] layer_ids, [train]) against the
    // target (failing with the file, key and fix); the target layers it captures, in the ring's order.
    std::vector<int> (*captured_layers)(const Config& cfg, const ModelShape& target) = nullptr;
    // `hsring config check`'s lines; `in_flight` and `step` are the phrases every type shares.
    DrafterLines (*describe)(const Config& cfg, const Derived& d, const std::string& in_flight,
                             const std::string& step) = nullptr;
};

// The kind of a [drafter] type; fails naming the known ones.
const DrafterKind& drafter_kind(std::string_view type);
// Every kind, in the table's order (the first is the default type).
std::span<const DrafterKind* const> drafter_kinds();

} // namespace hsring
