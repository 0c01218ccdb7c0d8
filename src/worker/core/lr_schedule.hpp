#pragma once
// Learning rate per optimizer step: linear warmup to the peak over warmup_steps, then cosine
// decay to peak * min_ratio, reached exactly on the last step of the run.
//
// The decay follows the run's progress in trained tokens, not in steps: how many steps a run has
// is not known in advance (packing fills each slot a little differently, re-issued samples are
// packed again), but the tokens it trains are: every sample pass of every epoch on every machine,
// `total_tokens`. After warmup,
//     progress = (tokens_done - warmup_end_tokens) / (total_tokens - warmup_end_tokens)
// where tokens_done counts the tokens trained up to and including this step and
// warmup_end_tokens those trained by the end of warmup. The last step has tokens_done =
// total_tokens, so progress 1 and lr = peak * min_ratio. With [train] max_steps the run's length
// is known and progress is (step - warmup) / (max_steps - warmup) instead.
//
// A pure function of (step, tokens_done, warmup_end_tokens): a drafter restarted from a
// checkpoint (which holds tokens_done and warmup_end_tokens) continues the same curve.
#include <cstdint>

namespace hsring::worker {

struct LrSchedule {
    double peak = 6e-4;
    double min_ratio = 0.1;
    std::uint64_t warmup_steps = 0;
    std::uint64_t max_steps = 0;      // > 0: decay over steps
    std::uint64_t total_tokens = 0;   // 0 = unknown: no decay after warmup

    // step is 1-based.
    double at(std::uint64_t step, std::uint64_t tokens_done, std::uint64_t warmup_end_tokens) const;
    // Progress of the decay phase in [0, 1] (0 during warmup).
    double progress(std::uint64_t step, std::uint64_t tokens_done, std::uint64_t warmup_end_tokens) const;
};

} // namespace hsring::worker
