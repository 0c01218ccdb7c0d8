#pragma once
// The real acceptance length tau during training ([eval] spec_prompts, spec_every): target.0 of
// machine 0 runs speculative decoding (model::spec_decode, greedy) of the latest committed drafter
// weights (RUN_DIR/checkpoints/step-N/drafter) with the target model it already holds, every
// prompt as a row of one batch (one draft and one verify per step for all of them: a measurement
// takes about one prompt's time), only while the ring is full or half of it READY
// (target_loop.cpp). So a measurement adds no model to any device but the drafter's weights on the
// target's, never touches the drafter's device, and never makes the drafter wait: the READY slots
// cover the decoding (a target slower than its drafter measures only when it gets ahead).
//
//   checkpoint of step N >= next due  ->  load its drafter  |  slot  |  decode all prompts at once
//   ->  metrics.jsonl {"step": N, "spec": {"tau", "acceptance_per_position", "step", "prompts", ..}}
//       (and TensorBoard, RUN_DIR/tensorboard/spec)  ->  next due = N + spec_every
//
// On a GPU shared with a drafter (allow_shared_gpus) it decodes at most 5% of the wall clock
// (spec_probe.cpp kSharedGpuShare): there every decoding second is taken from the drafter's steps.
// A checkpoint pruned away while it is loaded is skipped with a warning. The measurement of the
// final export, after every worker has exited, is the supervisor's (supervisor/spec_final.hpp).
#include "worker/core/context.hpp"

#include <memory>

namespace hsring::model {
class TargetModel;
}

namespace hsring::worker {

class SpecProbe {
public:
    // Inactive unless this worker is target.0 of machine 0 and [eval] spec_prompts and spec_every
    // are set. Reads the prompts (errors name the file).
    SpecProbe(Context& ctx, model::TargetModel& target);
    ~SpecProbe();
    bool active() const { return impl_ != nullptr; }
    // One unit of work, if any: loads the drafter of a committed checkpoint that is due, or decodes
    // every prompt with the one loaded (and writes its row).
    void work();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace hsring::worker
