"""The pipeline end to end on the CPU with the real workers (hsring-target, hsring-drafter) under
`hsring run`: a tiny Qwen3-shaped target, a 1-layer DFlash drafter, 2 targets + 1 drafter,
5 epochs of data/demo.jsonl.

One run undisturbed, one with a target SIGKILLed while it holds a WRITING slot and the drafter
SIGKILLed mid-training. Both must complete; `hsring ledger verify` must find every sample in the
final weights exactly once per epoch; the exported drafter must load back (hsring-model
check-drafter); and the two runs, same seed, must end with the same weights, bit for bit: the
killed run trains the re-issued samples in the same slots and steps as the clean one (docs/architecture.md
invariant 10), so every step's loss is the same too.

Two more runs have MoE targets (presets tiny-moe: Qwen3-MoE, and tiny-gpt-oss) and must complete
exactly once."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "supervisor"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import BUILD, TestFailure, check, main  # noqa: E402
from train_harness import TrainRun as BaseRun  # noqa: E402

HSRING_MODEL = os.path.join(BUILD, "src", "model", "hsring-model")


class TrainRun(BaseRun):
    """2 targets, 5 epochs of the whole demo data, two slots per step."""

    def __init__(self, tag, **kw):
        super().__init__(tag, targets='["cpu", "cpu"]', samples=600, epochs=5, tokens_per_step=1024, warmup_steps=30,
                         checkpoint_every=40, **kw)

    def losses(self):
        return [r["loss"] for r in self.rows()]

    def check_export(self):
        export = os.path.join(self.run_dir, "drafter")
        with open(os.path.join(export, "config.json")) as f:
            cfg = json.load(f)
        check(cfg["architectures"] == ["DFlashDraftModel"], str(cfg))
        check(cfg["dflash_config"]["mask_token_id"] == 511 and cfg["block_size"] == 8, str(cfg))
        import subprocess
        r = subprocess.run([HSRING_MODEL, "check-drafter", export], capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"the export does not load back: {r.stdout}\n{r.stderr}")


def tail_mean(xs, n=50):
    xs = xs[-n:]
    return sum(xs) / len(xs)


def test_clean_and_killed_runs_train_every_sample_once_to_the_same_weights():
    clean = TrainRun("e2ec")
    try:
        clean.start()
        clean.expect_exit(0, timeout=400)
        clean.verify()
        clean.check_export()
        clean_losses = clean.losses()
        clean_export = clean.export()
    finally:
        clean.cleanup()

    # target.0's first process holds its 3rd slot WRITING (HSRING_FAULT hold, CONTRACT.md) until
    # it is killed: the kill lands mid-write however fast the forward is; its restart has no fault.
    r = TrainRun("e2ek", env={"HSRING_FAULT": "target.0:write:3:hold"})
    try:
        r.start()
        r.wait_running(timeout=60)
        st = r.wait_for_fault_hold("target.0", "write", "writing", timeout=60)
        os.kill(r.worker(st, "target.0")["pid"], 9)
        r.wait_for(lambda s: r.worker(s, "target.0")["restarts"] == 1 and r.worker(s, "target.0")["state"] == "running",
                   "target.0 restarted", timeout=60)
        # The drafter mid-training, after its first checkpoint: it resumes from that checkpoint.
        r.wait_for(lambda s: (s["drafter"]["step"] or 0) >= 60, "drafter step 60", timeout=200)
        r.cli("kill", "drafter.0")
        st = r.wait_for(lambda s: r.worker(s, "drafter.0")["restarts"] == 1, "drafter.0 restarted", timeout=60)
        r.expect_exit(0, timeout=400)
        check(st["ring"]["counters"]["reclaimed_writing"] >= 1, f"the target's WRITING slot was reclaimed: {st['ring']}")
        r.verify()
        r.check_export()
        killed_losses = r.losses()
        killed_export = r.export()
    finally:
        r.cleanup()

    a = tail_mean(clean_losses)
    print(f"final loss (mean of the last 50 steps): clean {a:.3f}, with kills {tail_mean(killed_losses):.3f}; first "
          f"steps {clean_losses[0]:.3f}", flush=True)
    check(a < clean_losses[0] - 1.0, f"the clean run learned: {clean_losses[0]:.3f} -> {a:.3f}")
    check(killed_losses == clean_losses, "every step's loss equals the clean run's")
    check(killed_export == clean_export, "the killed and resumed run's export is the clean run's, bit for bit")


def moe_target_trains_every_sample_once(preset, what, name):
    """A MoE target in the pipeline, two target processes: the run completes, every sample is in
    the weights exactly once, every loss is finite and falls, the export loads back."""
    import math
    r = BaseRun(name, model=f"preset:{preset}", targets='["cpu", "cpu"]', samples=200, epochs=2,
                tokens_per_step=1024, warmup_steps=10, checkpoint_every=40)
    try:
        r.start()
        r.expect_exit(0, timeout=400)
        r.verify()
        TrainRun.check_export(r)
        losses = TrainRun.losses(r)
        check(losses and all(math.isfinite(x) for x in losses), f"{len(losses)} finite losses")
        check(sum(losses[-10:]) / 10 < losses[0] - 0.5, f"the drafter learned: {losses[0]:.3f} -> {losses[-1]:.3f}")
        print(f"{what} target: {len(losses)} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}, exactly once", flush=True)
    finally:
        r.cleanup()


def test_a_moe_target_trains_every_sample_once():
    """Qwen3-MoE (preset tiny-moe: 8 experts, top 2, one dense layer)."""
    moe_target_trains_every_sample_once("tiny-moe", "Qwen3-MoE", "e2em")


def test_a_gpt_oss_target_trains_every_sample_once():
    """gpt-oss (preset tiny-gpt-oss: 8 experts, top 2, sinks, biases, sliding window 4, YaRN)."""
    moe_target_trains_every_sample_once("tiny-gpt-oss", "gpt-oss", "e2eg")


if __name__ == "__main__":
    main([test_clean_and_killed_runs_train_every_sample_once_to_the_same_weights,
          test_a_moe_target_trains_every_sample_once, test_a_gpt_oss_target_trains_every_sample_once])
