"""What a user reads in metrics.jsonl when training for real (CPU, tiny target, 1-layer drafter),
under `hsring run`:

- the learning rate follows linear warmup, then a cosine over the trained tokens, and is exactly
  lr * min_lr_ratio on the last step; every row's lr is the schedule's value for that row's step
  and tokens (the formula of src/worker/lr_schedule.hpp, recomputed here);
- with [train] tokens_per_step at its default a step is one slot: the number of optimizer steps
  equals the number of slots the targets committed;
- a run whose drafter is SIGKILLed and resumed has the lr of an unkilled run at every step (within
  2% of the peak: the resumed steps repack the re-issued samples, so their token counts, and with
  them the cosine's progress, differ by a few hundred tokens out of ~40,000);
- two data-parallel drafter ranks (one slot each per step) learn like one rank with the same global
  batch (two slots per step), also when one rank is SIGKILLed and the gang restarts: the mean loss
  of each fifth of the run within 3% (see the test for why 3%)."""
import math
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "supervisor"))
from harness import Run, check, distributed, free_port, main  # noqa: E402

SOURCE = os.environ["HSRING_SOURCE_ROOT"]
sys.path.insert(0, os.path.join(SOURCE, "bin"))
from plot_run import read_metrics  # noqa: E402
LR, MIN_RATIO, WARMUP = 1e-2, 0.1, 20


class TrainRun(Run):
    def __init__(self, tag, drafters='["cpu"]', tokens_per_step=0, epochs=2, samples=300, eval_every=0, **kw):
        self.drafters_, self.tokens_per_step, self.epochs_, self.samples_ = drafters, tokens_per_step, epochs, samples
        self.eval_every = eval_every
        super().__init__(tag, **kw)

    def write_config(self, *args, **kwargs):
        data = os.path.join(self.tmp, "train.jsonl")
        with open(os.path.join(SOURCE, "data", "demo.jsonl")) as src, open(data, "w") as dst:
            for i, line in enumerate(src):
                if i < self.samples_:
                    dst.write(line)
        with open(self.config, "w") as f:
            f.write(f"""
[run]
name = "{self.name}"
run_dir = "{self.run_dir}"
seed = 11
[topology]
targets = ["cpu"]
drafters = {self.drafters_}
[ring]
slots = 6
slot_tokens = 512
huge_pages = "off"
[target]
model = "preset:tiny"
[drafter]
num_layers = 1
block_size = 8
[data]
path = "{data}"
epochs = {self.epochs_}
{f'eval_path = "{os.path.join(SOURCE, "data", "demo-heldout.jsonl")}"' if self.eval_every else ""}
[train]
lr = {LR}
min_lr_ratio = {MIN_RATIO}
warmup_steps = {WARMUP}
tokens_per_step = {self.tokens_per_step}
num_anchors = 64
loss_decay_gamma = 4.0
checkpoint_every = 25
eval_every = {self.eval_every}
[supervisor]
status_interval_s = 0.5
backoff_initial_s = 0.1
backoff_max_s = 0.5
stop_timeout_s = 60
{self.tail}
""")

    def evals(self):
        """The held-out evaluations of steps that survived."""
        return read_metrics(self.run_dir)[1]

    def rows(self):
        """metrics.jsonl's steps that survived: after a resume the re-done steps appear again, and
        the rows a killed drafter logged after its last checkpoint are left out (bin/plot_run.py).
        Held-out evaluations (lines with "eval") are left out."""
        return read_metrics(self.run_dir)[0]


def schedule(step, tokens_done, warmup_end, total):
    """src/worker/lr_schedule.hpp, independently."""
    if step <= WARMUP:
        return LR * step / WARMUP
    p = min(1.0, max(0.0, (tokens_done - warmup_end) / (total - warmup_end)))
    floor = LR * MIN_RATIO
    return floor + (LR - floor) * 0.5 * (1 + math.cos(math.pi * p))


def check_schedule(rows):
    total = rows[-1]["tokens_total"]
    warmup_end = next(r["tokens_total"] for r in rows if r["step"] == WARMUP)
    for r in rows:
        want = schedule(r["step"], r["tokens_total"], warmup_end, total)
        check(abs(r["lr"] - want) <= 1e-9 * LR, f"step {r['step']}: lr {r['lr']} != schedule {want}")
    check(abs(rows[-1]["lr"] - LR * MIN_RATIO) <= 1e-12, f"the last step ends at lr x min_lr_ratio: {rows[-1]}")
    after = [r["lr"] for r in rows if r["step"] > WARMUP]
    check(all(a >= b for a, b in zip(after, after[1:])), "the lr never rises after warmup")
    check(rows[len(rows) // 2]["lr"] < 0.9 * LR, "the lr decays during the run (it stayed at its peak before)")
    return total


def fifths(rows):
    n = len(rows) // 5
    return [sum(r["loss"] for r in rows[i * n:(i + 1) * n]) / n for i in range(5)]


def test_lr_follows_the_schedule_a_step_is_a_slot_and_a_resumed_run_keeps_the_lr():
    clean = TrainRun("lrc")
    try:
        clean.start()
        clean.expect_exit(0, timeout=300)
        clean.verify()
        rows = clean.rows()
        total = check_schedule(rows)
        commits = int(re.search(r"ring: (\d+) commits", clean.output()).group(1))
        check(all(r["slots"] == 1 for r in rows), "tokens_per_step = 0: one slot per step")
        check(all(math.isfinite(r["grad_norm"]) and r["grad_norm"] > 0 for r in rows),
              "every step reports its gradient norm (before the clip)")
        check(rows[-1]["step"] == commits, f"{rows[-1]['step']} optimizer steps for {commits} slots")
        print(f"clean: {commits} slots -> {rows[-1]['step']} steps, {total} tokens, lr {rows[0]['lr']:.2e} -> "
              f"{rows[-1]['lr']:.2e}", flush=True)
    finally:
        clean.cleanup()

    killed = TrainRun("lrk")
    try:
        killed.start()
        killed.wait_running(timeout=60)
        killed.wait_for(lambda s: (s["drafter"]["step"] or 0) >= 40, "drafter step 40 (checkpoint at 25)", timeout=200)
        killed.cli("kill", "drafter.0")
        killed.expect_exit(0, timeout=300)
        killed.verify()
        krows = killed.rows()
        check_schedule(krows)
        check(any(r["incarnation"] > 1 for r in krows), "the drafter was restarted")
    finally:
        killed.cleanup()
    clean_lr = {r["step"]: r["lr"] for r in rows}
    worst = max(abs(r["lr"] - clean_lr[r["step"]]) for r in krows if r["step"] in clean_lr)
    print(f"killed and resumed: max |lr - unkilled lr| at the same step = {worst:.2e} ({worst / LR:.2%} of the peak)",
          flush=True)
    check(worst <= 0.02 * LR, f"the resumed run keeps the unkilled run's lr per step: worst difference {worst}")


def test_two_ranks_learn_like_one_with_the_same_global_batch_also_after_a_rank_is_killed():
    one = TrainRun("dp1", tokens_per_step=1024, epochs=3, eval_every=100)
    try:
        one.start()
        one.expect_exit(0, timeout=400)
        one.verify()  # the held-out samples never enter the ledger
        rows1 = one.rows()
        # Held-out evaluation (data/demo-heldout.jsonl) after step 100 and of the final weights.
        evals = one.evals()
        check([e["step"] for e in evals] == [100, rows1[-1]["step"]] and evals[-1]["eval"]["final"],
              f"held-out rounds: {[(e['step'], e['eval']) for e in evals]}")
        check(all(e["eval"]["samples"] == 60 and len(e["eval"]["acc"]) == 7 for e in evals), str(evals))
        check(evals[-1]["eval"]["loss"] < evals[0]["eval"]["loss"], f"the held-out loss falls: {evals}")
    finally:
        one.cleanup()
    two = TrainRun("dp2", drafters='["cpu", "cpu"]', tokens_per_step=1024, epochs=3, tail=distributed(free_port()))
    try:
        two.start()
        two.wait_running(timeout=60)
        two.wait_for(lambda s: (s["drafter"]["step"] or 0) >= 60, "drafter step 60", timeout=300)
        two.cli("kill", "drafter.1")
        two.expect_exit(0, timeout=400)
        two.verify()
        check("restarting the drafter gang (2 ranks)" in two.output(), two.output())
        rows2 = two.rows()
        check(all(r["world"] == 2 and r["slots"] <= 2 for r in rows2), "two ranks, one slot each per step")
    finally:
        two.cleanup()
    f1, f2 = fifths(rows1), fifths(rows2)
    print("mean loss per fifth of the run: 1 rank " + " ".join(f"{x:.3f}" for x in f1) + "; 2 ranks " +
          " ".join(f"{x:.3f}" for x in f2), flush=True)
    check(f1[-1] < f1[0] - 0.2 and f2[-1] < f2[0] - 0.2, f"both learn: {f1} {f2}")
    # Why 3%: the two runs train the same samples with the same global batch and schedule, but
    # which samples share a slot and a step depends on process timing (targets pack concurrently,
    # ranks take slots as they come, the killed rank's samples are trained again later), so each
    # step's batch differs; the gradient sum itself is exact (tests/distributed/
    # test_gradient_sync.cpp: 1e-7 relative). On this machine the fifths differed by at most 0.4%
    # (1 rank 6.373 6.254 6.139 6.084 6.020, 2 ranks with a kill 6.373 6.249 6.134 6.073 6.000 and
    # 6.375 6.254 6.130 6.109 6.048). A constant factor in the gradient would not show here (AdamW
    # is scale invariant): test_gradient_sync checks the sum and the normalisation exactly; this
    # test checks that the gang shares the data, trains every sample once and steps together.
    for a, b in zip(f1, f2):
        check(abs(a - b) <= 0.03 * a, f"2 ranks {f2} vs 1 rank {f1}")


if __name__ == "__main__":
    main([test_lr_follows_the_schedule_a_step_is_a_slot_and_a_resumed_run_keeps_the_lr,
          test_two_ranks_learn_like_one_with_the_same_global_batch_also_after_a_rank_is_killed])
