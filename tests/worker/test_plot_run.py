"""metrics.jsonl after a drafter was killed past its last checkpoint: the steps it logged after that
checkpoint were rolled back (its successor trained them again), so bin/plot_run.py's read_metrics()
keeps each step once, from the incarnation whose weights survived, with or without the resume rows
({"resume": {"step": S, "incarnation": I}}) drafters write when they start from a checkpoint;
bin/plot-run plots only those rows and marks the resume; bench/gpu/summarize_run.py counts only
those rows. Hand-written files, no run."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

# The plot needs matplotlib: the venv's Python has it (a venv's python links to the system's, so
# compare the paths as given, and re-exec once).
if importlib.util.find_spec("matplotlib") is None and not os.environ.get("HSRING_PLOT_TEST_REEXEC"):
    py = os.environ.get("HSRING_PYTHON", "")
    if py and os.path.exists(py) and os.path.abspath(py) != os.path.abspath(sys.executable):
        os.environ["HSRING_PLOT_TEST_REEXEC"] = "1"
        os.execv(py, [py] + sys.argv)

ROOT = os.environ.get("HSRING_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bin"))
from plot_run import read_metrics, surviving  # noqa: E402


def step(s, inc, loss=None):
    """A metrics row as src/worker/drafter_loop.cpp writes it (the keys the readers use)."""
    return {"step": s, "incarnation": inc, "loss": loss if loss is not None else 10.0 - s / 10 + inc,
            "acc": [0.5, 0.25], "accept_len": 1.5, "lr": 1e-3, "tokens": 100, "tokens_total": 100 * s,
            "samples": 4, "step_ms": 50.0, "tokens_per_s": 2000.0, "data_wait_ms": 1.0, "h2d_ms": 0.5,
            "ring": {"free": 1, "writing": 0, "ready": 2, "reading": 1}, "device_peak_bytes": 0}


def evaluation(s):
    return {"step": s, "eval": {"loss": 9.0, "acc": [0.5, 0.25], "accept_len": 1.4, "samples": 8}}


# Incarnation 1 checkpointed step 10, logged steps 1..13 and the held-out evaluation of step 12,
# then was SIGKILLed; incarnation 2 resumed from step 10 and ran to step 20.
FIRST = [step(s, 1) for s in range(1, 11)] + [evaluation(10)] + [step(s, 1) for s in (11, 12)] + \
        [evaluation(12), step(13, 1)]
SECOND = [step(s, 2) for s in range(11, 21)]
RESUME = {"resume": {"step": 10, "incarnation": 2}}


class Surviving(unittest.TestCase):
    def check_killed_run(self, records, inferred):
        rows, evals, resumes = surviving(records)
        self.assertEqual([r["step"] for r in rows], list(range(1, 21)))
        self.assertEqual([r["incarnation"] for r in rows], [1] * 10 + [2] * 10)
        self.assertEqual([e["step"] for e in evals], [10])  # step 12's evaluation was of rolled-back weights
        self.assertEqual(resumes, [{"step": 10, "incarnation": 2, "dropped": 4, "inferred": inferred}])

    def test_a_resume_row_rolls_back_the_later_rows_of_earlier_incarnations(self):
        self.check_killed_run(FIRST + [RESUME] + SECOND, False)

    def test_without_resume_rows_a_new_incarnation_resumed_before_its_first_step(self):
        self.check_killed_run(FIRST + SECOND, True)

    def test_the_resume_step_comes_from_the_resume_row_when_steps_are_logged_sparsely(self):
        # log_every = 5: incarnation 2's first row is step 15, but it resumed from step 10.
        records = [step(s, 1) for s in (5, 10, 15)] + [{"resume": {"step": 10, "incarnation": 2}}] + \
                  [step(s, 2) for s in (15, 20)]
        rows, _, resumes = surviving(records)
        self.assertEqual([(r["step"], r["incarnation"]) for r in rows], [(5, 1), (10, 1), (15, 2), (20, 2)])
        self.assertEqual(resumes[0]["dropped"], 1)

    def test_a_graceful_stop_and_resume_drops_nothing_and_a_start_from_a_checkpoint_marks_nothing(self):
        # Run 1 stopped gracefully at step 10 (checkpointed); run 2 resumed there; a third
        # supervisor's drafter (incarnation 5) resumed at 15 after a kill at 17.
        records = [{"resume": {"step": 0, "incarnation": 1}}] + [step(s, 1) for s in range(1, 11)] + \
                  [{"resume": {"step": 10, "incarnation": 3}}] + [step(s, 3) for s in range(11, 18)] + \
                  [{"resume": {"step": 15, "incarnation": 5}}] + [step(s, 5) for s in range(16, 21)]
        rows, _, resumes = surviving(records)
        self.assertEqual([r["step"] for r in rows], list(range(1, 21)))
        self.assertEqual([r["incarnation"] for r in rows][14:17], [3, 5, 5])
        self.assertEqual([(r["step"], r["dropped"]) for r in resumes], [(10, 0), (15, 2)])

    def test_a_drafter_killed_before_its_first_checkpoint_leaves_nothing(self):
        rows, _, resumes = surviving([step(s, 1) for s in (1, 2, 3)] + [{"resume": {"step": 0, "incarnation": 2}}] +
                                     [step(s, 2) for s in (1, 2)])
        self.assertEqual([(r["step"], r["incarnation"]) for r in rows], [(1, 2), (2, 2)])
        self.assertEqual(resumes[0]["dropped"], 3)


class Readers(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="hsring-plot-")
        self.run = self.tmp.name
        with open(os.path.join(self.run, "metrics.jsonl"), "w") as f:
            for r in FIRST + [RESUME] + SECOND:
                f.write(json.dumps(r) + "\n")

    def tearDown(self):
        self.tmp.cleanup()

    def test_read_metrics(self):
        rows, evals, resumes = read_metrics(self.run)
        self.assertEqual(len(rows), 20)
        self.assertEqual(len(resumes), 1)

    @unittest.skipIf(importlib.util.find_spec("matplotlib") is None, "needs matplotlib (bin/setup installs it)")
    def test_plot_run_plots_the_surviving_rows_and_marks_the_resume(self):
        out = os.path.join(self.run, "plot.png")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "bin", "plot_run.py"), self.run, out],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("(1 resume marked)", r.stdout)
        self.assertGreater(os.path.getsize(out), 10000)

    def test_summarize_run_counts_the_surviving_rows(self):
        log = os.path.join(self.run, "supervisor.log")
        open(log, "w").close()
        r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu", "summarize_run.py"), self.run, log],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("drafter: 20 steps, 2000 tokens", r.stdout)
        self.assertIn("resumed from a checkpoint 1x (at step 10); 4 rolled-back rows", r.stdout)


if __name__ == "__main__":
    unittest.main()
