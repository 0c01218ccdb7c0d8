#pragma once
// One optimizer step of the drafter: the gradients divided by the step's loss weight, clipped to
// a global norm, then AdamW, in one pass over the fp32 state.
//
// torch::optim::AdamW::step runs ~9 elementwise kernels per parameter, and the divide and
// clip_grad_norm_ before it two more passes: ~108 B of memory traffic per parameter (20.7 ms of a
// 315 ms step at the recipe shape on an H200, 1.05 B parameters). ATen's fused multi-tensor AdamW
// (what torch.optim.AdamW(fused=True) calls) reads param, grad and both moments once and writes
// three of them: 28 B. The divide and the clip ride along as its grad_scale (the kernel divides
// each gradient by it), so the only other pass is the norm (4 B), read once on the host to skip a
// non-finite step.
//
// The state stays torch::optim::AdamW's (AdamWParamState per parameter, created as its step()
// would): checkpoints, snapshots and the gang's broadcast read and write it, and the lr schedule
// sets its param group's lr.
#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

namespace hsring::model {

// `p`'s AdamW state in `opt`, made as AdamW::step makes it at a parameter's first step (step 0,
// zero moments) if it has none yet: the one place that builds it (the fused step, the gang's
// state broadcast).
torch::optim::AdamWParamState& adamw_state(torch::optim::AdamW& opt, const at::Tensor& p);

class FusedAdamW {
public:
    // `opt`: one param group (the drafter's), amsgrad off. Outlives this.
    explicit FusedAdamW(torch::optim::AdamW& opt);

    // Divides every gradient by `divisor`, scales them all down so that their global L2 norm is at
    // most `clip` (clip <= 0: no clip; as clip_grad_norm_: by clip / (norm + 1e-6)), applies
    // AdamW with the group's current options. The gradients are left scaled or not (the kernel
    // may write them back): clear them (zero_grad) before the next backward. Parameters without a
    // gradient are skipped (no step counted), as torch's AdamW does.
    // A norm that is not finite (a NaN or inf gradient) changes nothing at all: no weight, moment
    // or step count moves (the norm is read once, on the host, to decide).
    // Returns the norm after the division, before the clip: a 0-dim fp32 tensor on the
    // parameters' device. Undefined if no parameter had a gradient.
    at::Tensor step(double divisor, double clip);

private:
    torch::optim::AdamW& opt_;
    at::Tensor steps_;  // [parameters] fp32 on their device: each one's step count (the kernel's bias correction)
};

} // namespace hsring::model
