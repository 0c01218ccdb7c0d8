"""`hsring plan --measure` end to end on the CPU (--device cpu: the benchmark programs run as
children at the demo config's shapes; the numbers are not GPU numbers, the path is the same),
and bench/gpu/plan_check.sh on the CPU with its three configs. Suite `model`: it runs LibTorch."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

BUILD = os.environ["HSRING_BUILD_ROOT"]
ROOT = os.environ["HSRING_SOURCE_ROOT"]
HSRING = os.path.join(BUILD, "src", "cli", "hsring")


class PlanMeasureCpu(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hsring-plan-measure-")
        self.env = dict(os.environ, HSRING_BIN_DIR=os.path.join(BUILD, "bench"), OMP_NUM_THREADS="2")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_measure_on_the_cpu(self):
        r = subprocess.run([HSRING, "plan", os.path.join(ROOT, "config", "demo.toml"), "--measure", "--device", "cpu",
                            "--seconds", "1", "--gpus", "4", "--host-mem", "8GiB", "--json"],
                           capture_output=True, text=True, env=self.env, timeout=500)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        j = json.loads(r.stdout)
        m = j["measure"]
        self.assertTrue(m["ok"], m)
        self.assertEqual(m["device"], "cpu")
        self.assertGreater(m["target"]["tokens_per_s"], 0)
        self.assertGreater(m["target"]["batch_tokens"], 0)
        self.assertGreater(m["drafter"]["tokens_per_s"], 0)
        self.assertGreater(m["drafter"]["samples_per_s"], 0)
        # The benchmark trained the plan's worst slot first.
        self.assertEqual(m["drafter"]["bench"]["result"]["slots"][0], j["workload"]["worst_micro_batch"]["slot"])
        self.assertIn("--config", m["drafter"]["bench"]["command"])
        # Splits of 4 GPUs: 1+3, 2+2, 3+1; the recommended one trains the most.
        self.assertEqual([(s["targets"], s["drafters"]) for s in m["splits"]], [(1, 3), (2, 2), (3, 1)])
        best = max(s["tokens_per_s"] for s in m["splits"])
        self.assertAlmostEqual(m["recommended"]["tokens_per_s"], best)
        # Text mode says the same for people.
        r = subprocess.run([HSRING, "plan", os.path.join(ROOT, "config", "demo.toml"), "--measure", "--device", "cpu",
                            "--seconds", "1", "--gpus", "2", "--host-mem", "8GiB"],
                           capture_output=True, text=True, env=self.env, timeout=500)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("on the CPU (a smoke run: not GPU numbers)", r.stdout)
        self.assertIn("recommended: [topology] targets = [0], drafters = [1]", r.stdout)

    def test_measure_a_recompute_config_on_the_cpu(self):
        """[train] recompute = "layers" reaches the drafter benchmark that --measure runs, and the
        plan sizes it with its own part. The CPU reports no allocator peak (measured 0 bytes), so
        predicted-vs-measured memory is a GPU check (tests/plan/test_plan_memory.cpp holds the
        H200 numbers)."""
        with open(os.path.join(ROOT, "config", "demo.toml")) as f:
            text = f.read()
        text = text.replace('"../data/', '"' + os.path.join(ROOT, "data") + "/").replace(
            "[train]\n", '[train]\nrecompute = "layers"\n')
        cfg = os.path.join(self.tmp, "demo-recompute.toml")
        with open(cfg, "w") as f:
            f.write(text)
        r = subprocess.run([HSRING, "plan", cfg, "--measure", "--device", "cpu", "--seconds", "1", "--gpus", "2",
                            "--host-mem", "8GiB", "--json"], capture_output=True, text=True, env=self.env, timeout=500)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual(j["workload"]["recompute"], "layers")
        parts = j["host"]["cpu_workers"]["drafter.0"]["parts"]
        self.assertIn("activations_recompute_layers", parts)
        self.assertNotIn("activations", parts)
        m = j["measure"]
        self.assertTrue(m["ok"], m)
        self.assertEqual(m["drafter"]["bench"]["result"]["recompute"], "layers")
        self.assertIn("--config", m["drafter"]["bench"]["command"])
        self.assertGreater(m["drafter"]["samples_per_s"], 0)
        self.assertGreater(m["drafter"]["predicted_allocated_bytes"], 0)
        self.assertEqual(m["drafter"]["measured_peak_allocated_bytes"], 0)

    def test_measure_an_eagle3_config_on_the_cpu(self):
        """An EAGLE-3 run's drafter: hsring-bench drafter --config trains the config's [drafter] type
        (through the drafter-type seam, as the worker does) on the plan's slots, worst first."""
        r = subprocess.run([HSRING, "plan", os.path.join(ROOT, "config", "demo-eagle3.toml"), "--measure", "--device",
                            "cpu", "--seconds", "1", "--gpus", "2", "--host-mem", "8GiB", "--json"],
                           capture_output=True, text=True, env=self.env, timeout=500)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual(j["workload"]["drafter_type"], "eagle3")
        m = j["measure"]
        self.assertTrue(m["ok"], m)
        result = m["drafter"]["bench"]["result"]
        self.assertEqual(result["type"], "eagle3")
        self.assertEqual(result["slots"][0], j["workload"]["worst_micro_batch"]["slot"])
        self.assertGreater(m["drafter"]["tokens_per_s"], 0)
        self.assertGreater(m["drafter"]["samples_per_s"], 0)
        self.assertGreater(m["drafter"]["predicted_allocated_bytes"], 0)
        # Every micro-batch of the first slot trained rows (EAGLE-3's units) and ran its backward.
        self.assertTrue(result["phases"])
        self.assertTrue(all(ph["blocks"] > 0 for ph in result["phases"]), result["phases"])

    def test_plan_check_script_on_the_cpu(self):
        out = os.path.join(self.tmp, "out")
        env = dict(self.env, PLAN_BASE=os.path.join(ROOT, "config", "demo.toml"),
                   PLAN_DATA=os.path.join(ROOT, "data", "demo.jsonl"), PLAN_DEVICE="cpu", PLAN_MBT="256",
                   PLAN_SLOT="2048", PLAN_RING="64MiB", PLAN_SECONDS="1")
        r = subprocess.run([os.path.join(ROOT, "bench", "gpu", "plan_check.sh"), BUILD, out], capture_output=True,
                           text=True, env=env, timeout=500)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for name in ("base", "mbt", "slot"):
            with open(os.path.join(out, name + ".json")) as f:
                j = json.load(f)
            self.assertTrue(j["measure"]["ok"], name)
        with open(os.path.join(out, "mbt.json")) as f:
            self.assertEqual(json.load(f)["workload"]["micro_batch_tokens"], 256)
        with open(os.path.join(out, "slot.json")) as f:
            self.assertEqual(json.load(f)["workload"]["target_batch_tokens"], 2048)
        with open(os.path.join(out, "plan_check.md")) as f:
            table = f.read()
        self.assertIn("| config | shapes | target pred GiB |", table)
        self.assertEqual(table.count("\n| base |") + table.count("\n| mbt |") + table.count("\n| slot |"), 3)


if __name__ == "__main__":
    unittest.main(verbosity=2)
