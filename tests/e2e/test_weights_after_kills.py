"""What a user observes after kills, with the real workers on the CPU (a tiny Qwen3-shaped target,
a 1-layer DFlash drafter, and an EAGLE-3 drafter): the exported weights of a run that was killed anywhere and resumed are
the unkilled run's, bit for bit (invariant 10, docs/architecture.md: training is a function of config, data
and seed), and nothing non-finite is ever trained, checkpointed or exported.

- one slot per step: drafter SIGKILL, then supervisor SIGKILL (the orphaned drafter checkpoints and
  exits), then a second `hsring run`; the same with an EAGLE-3 drafter;
- a drafter SIGKILLed with two background checkpoint writes in flight (one held mid-write, one
  queued behind it, the next checkpoint delayed): it resumes from the last commit;
- three slots per step: a graceful `hsring stop` mid-step, `hsring run` again, `hsring stop --now`,
  `hsring run` again (a stop never makes a short step);
- an FP8 target ([target] weights = "fp8", emulated on the CPU) SIGKILLed mid-run, then the FP8
  drafter ([train] matmul and lm_head = "fp8");
- a gang of two drafter ranks (Gloo): a rank SIGKILLed (the gang restarts), then the supervisor;
- a target whose embedding row of one token is NaN: the samples with that token are rejected and
  counted, no step is non-finite, the export is finite;
- a NaN gradient (HSRING_FAULT ...:grad:N:nan): that step changes nothing and is reported;
  [train] max_nonfinite_steps of them in a row stop the run (exit 4), the last checkpoint kept."""
import json
import math
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "supervisor"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, distributed, free_port, main  # noqa: E402
from train_harness import SOURCE, TrainRun as BaseRun, tiny_qwen3_dir  # noqa: E402


class TrainRun(BaseRun):
    """2 targets, 160 samples x 2 epochs, a checkpoint every 7 steps (several per run)."""

    def __init__(self, tag, samples=160, mask="", **kw):
        super().__init__(tag, targets='["cpu", "cpu"]', samples=samples, warmup_steps=10, checkpoint_every=7,
                         drafter_extra=mask, **kw)

    def step(self):
        st = self.status()
        return st["drafter"]["step"] or 0


def safetensors_finite(blob):
    """Every float32 of a safetensors file is finite (the drafter's export is fp32 on the CPU)."""
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    for name, t in header.items():
        if name == "__metadata__":
            continue
        check(t["dtype"] == "F32", f"{name}: {t['dtype']}")
        a, b = t["data_offsets"]
        for (x,) in struct.iter_unpack("<f", data[a:b]):
            if not math.isfinite(x):
                return False
    return True


def reference(tag, **kw):
    r = TrainRun(tag, **kw)
    try:
        r.start()
        r.expect_exit(0, timeout=300)
        r.verify()
        return r.export(), r.rows()
    finally:
        r.cleanup()


def check_same(ref, run, what):
    blob, rows = ref
    got = run.export()
    check(got == blob, f"{what}: the export differs from the unkilled run's")
    mine = run.rows()
    check([r["step"] for r in mine] == [r["step"] for r in rows], f"{what}: other steps than the unkilled run")
    check(all(a["loss"] == b["loss"] and a["slots"] == b["slots"] for a, b in zip(mine, rows)),
          f"{what}: a step's loss or slots differ from the unkilled run's")
    print(f"{what}: export and all {len(rows)} steps' losses equal the unkilled run's", flush=True)


def check_tensorboard(run, rows):
    """TensorBoard's own reader sees each step once with the unkilled run's loss (the restarts'
    SessionLog START dropped the rolled-back steps); skipped without the tensorboard package."""
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        print("TensorBoard: not checked (no tensorboard package)", flush=True)
        return
    tb = os.path.join(run.run_dir, "tensorboard")
    check(os.path.isdir(tb), f"{tb}: the drafter writes TensorBoard events")
    acc = event_accumulator.EventAccumulator(tb, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    loss = [(e.step, e.value) for e in acc.Scalars("train/loss")]
    check([st for st, _ in loss] == [r["step"] for r in rows], f"TensorBoard steps: {[st for st, _ in loss]}")
    check(all(abs(v - r["loss"]) <= 1e-6 * max(1.0, abs(r["loss"])) for (_, v), r in zip(loss, rows)),
          "TensorBoard's train/loss is the unkilled run's")
    print(f"TensorBoard: {len(os.listdir(tb))} event files, train/loss of all {len(rows)} steps as unkilled", flush=True)


def test_one_slot_per_step_drafter_and_supervisor_killed():
    ref = reference("w1r")
    r = TrainRun("w1k")
    try:
        r.start()
        r.kill_and_wait_restart("drafter.0", 10, 18)  # after the checkpoint at step 7
        r.supervisor_kill_and_rerun()
        r.expect_exit(0, timeout=300)
        r.verify()
        check(len(open(os.path.join(r.run_dir, "metrics.jsonl")).read().split('"resume"')) >= 3,
              "metrics.jsonl marks each resume")
        check_same(ref, r, "drafter SIGKILL + supervisor SIGKILL")
        check_tensorboard(r, ref[1])
    finally:
        r.cleanup()


EAGLE3 = 'type = "eagle3"\nttt_steps = 3\ndraft_vocab = 200'


def test_eagle3_drafter_and_supervisor_killed():
    """The same kills with an EAGLE-3 drafter ([drafter] type = "eagle3", a draft vocabulary of 200
    of the target's 512 tokens from the data's counts): the export equals the unkilled run's."""
    ref = reference("e3r", mask=EAGLE3)
    r = TrainRun("e3k", mask=EAGLE3)
    try:
        r.start()
        r.kill_and_wait_restart("drafter.0", 10, 18)  # after the checkpoint at step 7
        r.supervisor_kill_and_rerun()
        r.expect_exit(0, timeout=300)
        r.verify()
        check_same(ref, r, "EAGLE-3: drafter SIGKILL + supervisor SIGKILL")
        cfg = json.load(open(os.path.join(r.run_dir, "drafter", "config.json")))
        check(cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["draft_vocab_size"] == 200, str(cfg))
    finally:
        r.cleanup()


def test_a_kill_with_two_background_writes_in_flight_resumes_from_the_last_commit():
    """Double-buffered checkpoints: the drafter's second write (step 14) is held mid-write by
    HSRING_FAULT, the third (step 21) is copied into the other host buffer and queued behind it, the
    fourth (28) is delayed, and training goes on past them. SIGKILLed then, the drafter restarts
    from the last commit (step 7): every sample exactly once, and the export and every step's loss
    equal the unkilled run's."""
    ref = reference("w2r")
    r = TrainRun("w2k", env={"HSRING_FAULT": "drafter.0:checkpoint:2:hold"})
    try:
        r.start()
        r.wait_running(timeout=60)
        r.wait_for(lambda s: (s["drafter"]["step"] or 0) >= 31, "training past two writes in flight", timeout=200)
        with open(os.path.join(r.run_dir, "checkpoints", "latest")) as f:
            check(int(f.read()) == 7, "the held write (step 14) and the one behind it (21) are not committed")
        log = open(os.path.join(r.run_dir, "logs", "drafter.0.log")).read()
        check("checkpoint of step 28 delayed: the writes of steps 14 and 21 are still in flight" in log, log[-2000:])
        r.cli("kill", "drafter.0")
        r.expect_exit(0, timeout=300)
        r.verify()
        check_same(ref, r, "drafter SIGKILL with two background writes in flight")
    finally:
        r.cleanup()


def test_an_fp8_target_and_fp8_drafter_killed_mid_run_give_the_unkilled_runs_weights():
    """[target] weights = "fp8": a re-issued slot is captured again by a restarted FP8 target. Its
    activations are scaled per token, so the hidden states do not depend on what else the slot
    holds or on the process. The drafter trains with [train] matmul and lm_head = "fp8" (row
    scales, the head quantised once per process): a restarted drafter quantises the same weights
    the same way. The export equals the unkilled FP8 run's bit for bit."""
    fp8 = 'weights = "fp8"'
    train = 'matmul = "fp8"\nlm_head = "fp8"'
    ref = reference("w8r", target_extra=fp8, train_extra=train)
    r = TrainRun("w8k", target_extra=fp8, train_extra=train)
    try:
        r.start()
        r.kill_and_wait_restart("target.0", 6, 12)
        r.kill_and_wait_restart("drafter.0", 16, 22)  # after the checkpoint at step 14
        r.expect_exit(0, timeout=300)
        r.verify()
        check_same(ref, r, "FP8 target SIGKILL + FP8 drafter SIGKILL")
    finally:
        r.cleanup()


def test_three_slots_per_step_graceful_stop_and_stop_now():
    ref = reference("w3r", tokens_per_step=1536)
    check(all(r["slots"] == 3 for r in ref[1][:-1]), "three slots per step (the plan's last may be short)")
    r = TrainRun("w3k", tokens_per_step=1536)
    try:
        r.start()
        r.wait_running(timeout=60)
        r.wait_for(lambda s: (s["drafter"]["step"] or 0) >= 5, "drafter step 5", timeout=200)
        r.cli("stop")
        r.expect_exit(0, timeout=120)
        r.start()
        r.wait_running(timeout=60)
        r.wait_for(lambda s: (s["drafter"]["step"] or 0) >= 14, "drafter step 14", timeout=200)
        r.cli("stop", "--now")
        r.expect_exit(0, timeout=120)
        r.start()
        r.expect_exit(0, timeout=300)
        r.verify()
        check_same(ref, r, "graceful stop + stop --now")
    finally:
        r.cleanup()


def test_two_rank_gang_rank_and_supervisor_killed():
    ref = reference("w2r", drafters='["cpu", "cpu"]', tail=distributed(free_port()))
    r = TrainRun("w2k", drafters='["cpu", "cpu"]', tail=distributed(free_port()))
    try:
        r.start()
        r.wait_running(timeout=60)
        r.wait_for(lambda s: (s["drafter"]["step"] or 0) >= 9, "drafter step 9", timeout=200)
        r.cli("kill", "drafter.1")
        r.wait_for(lambda s: r.worker(s, "drafter.1")["restarts"] >= 1 and (s["drafter"]["step"] or 0) >= 15,
                   "the gang restarted and at step 15", timeout=200)
        r.supervisor_kill_and_rerun()
        r.expect_exit(0, timeout=300)
        r.verify()
        check_same(ref, r, "2-rank gang: a rank SIGKILL + supervisor SIGKILL")
    finally:
        r.cleanup()


def nan_embedding_target(tmp, token):
    """A HF Qwen3 dir of preset:tiny's shape (vocab 512) whose embedding row `token` is NaN."""
    return tiny_qwen3_dir(os.path.join(tmp, "nan-target"), seed=3, proj_std=0.02, nan_token=token)


def test_nan_embedding_target_rejects_its_samples_and_trains_nothing_nonfinite():
    token = 369
    probe = TrainRun("wnp")  # only for its temporary directory
    try:
        model = nan_embedding_target(probe.tmp, token)
        with open(os.path.join(SOURCE, "data", "demo.jsonl")) as f:
            samples = [json.loads(l) for l in f if l.strip()]
        with_token = sum(token in s["input_ids"] for s in samples)
        check(with_token == 16, f"16 of the 600 demo samples hold token {token}: {with_token}")
        r = TrainRun("wnan", samples=600, epochs=1, model=model, mask="mask_token_id = 511")
        try:
            r.start()
            r.expect_exit(0, timeout=300)
            out = r.output()
            check(f"{with_token} rejected (non-finite hidden states" in out,
                  f"the run's last line counts {with_token} rejected samples:\n{out[-2000:]}")
            v = r.verify()
            check(f"except {with_token} sample passes rejected" in v.stdout, v.stdout)
            rows = r.rows()
            check(all(math.isfinite(x["loss"]) and math.isfinite(x["grad_norm"]) for x in rows)
                  and not any("skipped_nonfinite" in x for x in rows), "every step finite, none skipped")
            check(safetensors_finite(r.export()), "the export is finite")
            logs = "".join(open(os.path.join(r.run_dir, "logs", n)).read() for n in ("target.0.log", "target.1.log"))
            check("non-finite hidden states: rejected, never trained" in logs, "a target names each rejected sample")
            print(f"NaN embedding row {token}: {with_token} samples rejected, {len(rows)} finite steps, finite export",
                  flush=True)
        finally:
            r.cleanup()
    finally:
        probe.cleanup()


def test_nan_gradient_steps_change_nothing_and_three_in_a_row_stop_the_run():
    r = TrainRun("wg1", env={"HSRING_FAULT": "drafter.0:grad:4:nan"})
    try:
        r.start()
        r.expect_exit(0, timeout=300)
        rows = r.rows()
        skipped = [x for x in rows if "skipped_nonfinite" in x]
        check([x["step"] for x in skipped] == [4] and skipped[0]["skipped_nonfinite"] == "gradient norm", str(skipped))
        check("step 4 skipped: non-finite gradient norm" in open(os.path.join(r.run_dir, "logs", "drafter.0.log")).read(),
              "the drafter warns, naming the step")
        check(safetensors_finite(r.export()), "the export is finite")
    finally:
        r.cleanup()
    faults = ",".join(f"drafter.0:grad:{n}:nan" for n in (9, 10, 11))
    r = TrainRun("wg3", env={"HSRING_FAULT": faults})
    try:
        r.start()
        r.expect_exit(4, timeout=300)
        out = r.output()
        check("training diverged" in out and "max_nonfinite_steps = 3" in out, out[-2000:])
        check(not os.path.exists(os.path.join(r.run_dir, "drafter")), "nothing is exported")
        with open(os.path.join(r.run_dir, "checkpoints", "latest")) as f:
            check(int(f.read()) == 7, "the last good checkpoint (step 7) is kept")
        print("NaN gradients: one step skipped and reported; three in a row stop the run with exit 4", flush=True)
    finally:
        r.cleanup()


if __name__ == "__main__":
    main([test_one_slot_per_step_drafter_and_supervisor_killed,
          test_eagle3_drafter_and_supervisor_killed,
          test_a_kill_with_two_background_writes_in_flight_resumes_from_the_last_commit,
          test_an_fp8_target_and_fp8_drafter_killed_mid_run_give_the_unkilled_runs_weights,
          test_three_slots_per_step_graceful_stop_and_stop_now,
          test_two_rank_gang_rank_and_supervisor_killed,
          test_nan_embedding_target_rejects_its_samples_and_trains_nothing_nonfinite,
          test_nan_gradient_steps_change_nothing_and_three_in_a_row_stop_the_run])
