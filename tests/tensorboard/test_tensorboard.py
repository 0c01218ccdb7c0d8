"""TensorBoard shows what a run trained (issue 21, item 5): RUN_DIR/tensorboard's event files, read
with TensorBoard's own reader (EventAccumulator, which checks every record's CRCs), hold one value
per step for every metric of metrics.jsonl — the rows that survived: a drafter SIGKILLed after its
last checkpoint logged steps its successor trains again, and TensorBoard must drop those (the
restart's SessionLog START purges them) exactly as bin/plot-run does. Skipped (77) without the
tensorboard package or when hsring was built without protobuf."""
import math
import os
import sys

SUP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "supervisor")
sys.path.insert(0, SUP)
from harness import Run, check, main  # noqa: E402

sys.path.insert(0, os.path.join(os.environ["HSRING_SOURCE_ROOT"], "bin"))
from plot_run import read_metrics  # noqa: E402

try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError:
    print("skip: the tensorboard package is not installed (bin/setup installs it)")
    sys.exit(77)


def scalars(run_dir):
    tb = os.path.join(run_dir, "tensorboard")
    acc = event_accumulator.EventAccumulator(tb, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-6 * max(1.0, abs(b))


def test_tensorboard_holds_the_surviving_rows_after_a_drafter_kill():
    # checkpoint_every = 5: the drafter is SIGKILLed in its 13th stage, after step 10's checkpoint;
    # steps 11-12 it logged are trained again by its successor.
    r = Run("tb", step_ms=20, env={"HSRING_FAULT": "drafter.0:stage:13:kill"})
    try:
        r.start()
        r.expect_exit(0, timeout=120)
        out = r.output()
        if "built without TensorBoard support" in open(os.path.join(r.run_dir, "logs", "drafter.0.log")).read():
            print("skip: this hsring was built without protobuf (no TensorBoard events)")
            sys.exit(77)
        rows, _, resumes = read_metrics(r.run_dir)
        check(resumes and any(x["dropped"] > 0 for x in resumes),
              f"the kill rolled back logged steps: {resumes}\n{out}")
        files = os.listdir(os.path.join(r.run_dir, "tensorboard"))
        check(len(files) == 2 and all(f.startswith("events.out.tfevents.") for f in files),
              f"one event file per drafter process: {files}")
        s = scalars(r.run_dir)
        for tag, key in [("train/loss", "loss"), ("train/lr", "lr"), ("train/grad_norm", "grad_norm"),
                         ("train/tokens", "tokens"), ("train/ring/ready", None), ("train/acc/1", None)]:
            check(tag in s, f"{tag} in TensorBoard: {sorted(s)}")
            steps = [st for st, _ in s[tag]]
            check(steps == [row["step"] for row in rows],
                  f"{tag}: one value per surviving step, in order: {steps} vs {[row['step'] for row in rows]}")
            if key:
                bad = [(st, v, row[key]) for (st, v), row in zip(s[tag], rows) if not same(v, float(row[key]))]
                check(not bad, f"{tag} equals metrics.jsonl's {key}: {bad[:5]}")
        acc1 = [v for _, v in s["train/acc/1"]]
        check(acc1 == [float(row["acc"][0]) for row in rows] or
              all(same(a, float(row["acc"][0])) for a, row in zip(acc1, rows)), "train/acc/1 is acc[0]")
        check(not {"train/step", "train/time", "train/incarnation", "train/world"} & set(s), sorted(s))
        r.verify()
        print(f"TensorBoard: {len(s)} scalar tags, {len(rows)} steps, {sum(x['dropped'] for x in resumes)} rolled-back "
              "rows dropped")
    finally:
        r.cleanup()


if __name__ == "__main__":
    main([test_tensorboard_holds_the_surviving_rows_after_a_drafter_kill])
