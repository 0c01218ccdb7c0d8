#pragma once
// The data set reader's options a run's config asks for: the bridge between the config and the
// reader (src/data knows no config).
#include "hsring/config.hpp"
#include "hsring/dataset.hpp"
#include "hsring/drafter_kind.hpp"

namespace hsring::data {

// The options a run uses: [data] on_bad_line, the derived max_seq_len, the target's vocabulary,
// the mask token of a type that drafts with one.
inline DatasetOptions dataset_options(const Config& cfg, const Derived& d) {
    return {cfg.data.on_bad_line, d.max_seq_len, d.target.vocab_size,
            cfg.data.responses == Responses::Target ? cfg.generate.max_new_tokens : 0,
            cfg.run.mode == RunMode::Train && drafter_kind(cfg.drafter.type).drafts_with_mask_token ? d.mask_token_id : -1};
}

} // namespace hsring::data
