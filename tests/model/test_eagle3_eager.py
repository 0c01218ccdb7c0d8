#!/usr/bin/env python3
"""bench/python/eagle3_eager.py computes the EAGLE-3 step it times: on the reference's tiny case
(tests/model/eagle3_reference.py parity: speculators' Eagle3DraftModel, fp32, 3 samples, 3 TTT
steps, masked prompt tokens), its training-time-test loss run without autocast gives each step's
masked KL sum and, through the reference's per-step normalisation, the gradients of every trained
tensor that the reference gives.

Exit 77 (skip) where the reference cannot run (no torch, transformers, safetensors or speculators).
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DIMS = dict(hidden=32, heads=4, kv_heads=2, head_dim=8, intermediate=64, eps=1e-6, theta=10000.0)  # the case's
STEPS, DECAY, EPS = 3, 0.8, 1e-5


def main():
    py = os.environ.get("HSRING_PYTHON")  # the venv with torch (tests/meson.build), as the C++ tests use
    if py and os.path.realpath(py) != os.path.realpath(sys.executable):
        os.execv(py, [py, __file__])
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, str(HERE / "eagle3_reference.py"), "parity", "--out", tmp])
        if r.returncode != 0:
            return r.returncode  # 77: the reference's packages are missing
        import torch
        from safetensors.torch import load_file
        sys.path.insert(0, str(ROOT / "bench" / "python"))
        import eagle3_eager as E

        w = load_file(os.path.join(tmp, "drafter", "model.safetensors"))
        inp = load_file(os.path.join(tmp, "inputs.safetensors"))
        ref = load_file(os.path.join(tmp, "reference.safetensors"))
        torch.set_grad_enabled(True)
        drafter = E.Eagle3Drafter(DIMS)
        drafter.load_state_dict({k: v for k, v in w.items() if k not in ("lm_head.weight", "d2t", "t2d")}, strict=True)
        d = DIMS["head_dim"]
        inv = 1.0 / (DIMS["theta"] ** (torch.arange(0, d, 2, dtype=torch.float) / d))
        samples = sum(1 for k in inp if k.endswith(".tokens"))
        total, worst_kl = torch.zeros(()), 0.0
        for s in range(samples):
            tokens, mask = inp[f"s{s}.tokens"][None], inp[f"s{s}.loss_mask"][None]
            fused = torch.cat(list(inp[f"s{s}.aux"]), -1)[None]
            _, _, kl_sums = E.ttt_loss(drafter, inp["target.embed"], w["lm_head.weight"], inp["target.norm"],
                                       DIMS["eps"], inv, fused, inp[f"s{s}.last"][None], tokens, mask, STEPS, DECAY)
            step_mask = mask[:, 1:]
            for k in range(STEPS):
                want = ref[f"s{s}.step{k}.kl_sum"].item()
                worst_kl = max(worst_kl, abs(kl_sums[k].item() - want) / abs(want))
                # the reference's loss: each step's sum over its own mask sum
                total = total + torch.tensor(DECAY) ** k * kl_sums[k] / (step_mask.sum() + EPS)
                step_mask = E.shift_left(step_mask)
        total.backward()
        worst_grad = max(((p.grad - ref["grad." + n]).abs().max() / ref["grad." + n].abs().max()).item()
                         for n, p in drafter.named_parameters())
        loss_sum = ref["loss_sum"].item()
        print(f"eagle3_eager vs speculators: KL sums within {worst_kl:.2e}, loss_sum {total.item():.6f} "
              f"(reference {loss_sum:.6f}), gradients within {worst_grad:.2e} of their largest entry")
        assert worst_kl < 1e-5, worst_kl
        assert abs(total.item() - loss_sum) < 1e-5 * abs(loss_sum), (total.item(), loss_sum)
        assert worst_grad < 1e-5, worst_grad
    return 0


if __name__ == "__main__":
    sys.exit(main())
