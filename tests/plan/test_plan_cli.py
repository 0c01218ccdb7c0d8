"""`hsring plan` as a user runs it: exit codes (0 fits, 1 does not, 2 usage/config), the knob it
names for an over-budget drafter (and that the value it names fits when planned again), the
--json shape of issue 14, capacity from nvidia-smi (a fake one via $HSRING_NVIDIA_SMI), bad input
messages, --measure without a GPU, and an EAGLE-3 drafter's plan."""
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

BUILD = os.environ["HSRING_BUILD_ROOT"]
ROOT = os.environ["HSRING_SOURCE_ROOT"]
HSRING = os.path.join(BUILD, "src", "cli", "hsring")

QWEN = """
[run]
name = "plan-cli"
[topology]
targets = [0]
drafters = [1]
[ring]
size = "16GiB"
slot_tokens = 16384
[target]
model = "preset:qwen3-8b"
[drafter]
num_layers = 5
[data]
path = "{data}"
[train]
micro_batch_tokens = {mbt}
"""


def write_long_data(path, samples=40, length=3072):
    """Like bench/gpu/make_long_data.py: loss mask on the second half."""
    with open(path, "w") as f:
        for i in range(samples):
            ids = [(i * 7919 + k * 104729) % 151000 for k in range(length)]
            half = length // 2
            f.write(json.dumps({"input_ids": ids, "loss_mask": [0] * half + [1] * (length - half)}) + "\n")


class PlanCli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="hsring-plan-cli-")
        cls.data = os.path.join(cls.tmp, "long.jsonl")
        write_long_data(cls.data)
        # No GPU unless a test says so: a missing nvidia-smi.
        cls.env = dict(os.environ, HSRING_NVIDIA_SMI=os.path.join(cls.tmp, "no-nvidia-smi"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def config(self, name, mbt=16384, extra=""):
        path = os.path.join(self.tmp, name + ".toml")
        with open(path, "w") as f:
            f.write(QWEN.format(data=self.data, mbt=mbt) + extra)
        return path

    def plan(self, *args, env=None):
        return subprocess.run([HSRING, "plan", *args], capture_output=True, text=True, env=env or self.env, timeout=60)

    def test_cpu_demo_fits(self):
        r = self.plan(os.path.join(ROOT, "config", "demo.toml"), "--host-mem", "8GiB")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("everything fits", r.stdout)
        self.assertIn("target.0 on the CPU", r.stdout)

    def test_json_shape(self):
        r = self.plan(self.config("json"), "--gpu-mem", "141GiB", "--host-mem", "1TiB", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual([g["index"] for g in j["gpus"]], [0, 1])
        self.assertEqual(j["gpus"][0]["workers"], ["target.0"])
        self.assertEqual(j["gpus"][1]["workers"], ["drafter.0"])
        for g in j["gpus"]:
            self.assertEqual(g["capacity_bytes"], 141 * 2**30)
            self.assertEqual(sum(g["parts"].values()), g["predicted_peak_bytes"])
            self.assertTrue(g["fits"])
        for part in ("weights", "activations", "captured_hidden_states"):
            self.assertIn(part, j["gpus"][0]["parts"])
        for part in ("embedding_and_lm_head", "bf16_weight_casts", "fp32_master_weights", "adamw_state",
                     "fp32_gradients", "activations", "loss_chunk_logits", "inflight_slots", "cuda_context",
                     "allocator_slack"):
            self.assertIn(part, j["gpus"][1]["parts"])
        h = j["host"]
        self.assertEqual(sum(h["parts"].values()), h["predicted_bytes"])
        self.assertGreater(h["huge_pages"], 0)
        self.assertIn("ring", h["parts"])
        self.assertTrue(j["fits"])

    def test_over_budget_names_a_knob_whose_value_fits(self):
        cfg = self.config("over")
        r = self.plan(cfg, "--gpu-mem", "54GiB", "--host-mem", "1TiB")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("GPU 1", r.stdout)
        self.assertIn("DOES NOT FIT", r.stdout)
        m = re.search(r"\[train\] micro_batch_tokens = (\d+)\s+\(now 16384\): drafter\.0 on GPU 1 at ([\d.]+) GiB of "
                      r"54\.00 GiB; everything fits", r.stdout)
        self.assertIsNotNone(m, r.stdout)
        fixed = self.config("fixed", mbt=int(m.group(1)))
        r2 = self.plan(fixed, "--gpu-mem", "54GiB", "--host-mem", "1TiB", "--json")
        self.assertEqual(r2.returncode, 0, r2.stdout)
        j = json.loads(r2.stdout)
        self.assertAlmostEqual(j["gpus"][1]["predicted_peak_bytes"] / 2**30, float(m.group(2)), places=2)

    def test_recompute_layers(self):
        """[train] recompute = "layers": its own activations part, a lower drafter peak, and the
        knob offered (with its cost) when recompute is "none" and the drafter does not fit."""
        r = self.plan(self.config("none"), "--gpu-mem", "141GiB", "--host-mem", "1TiB", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        none = json.loads(r.stdout)
        self.assertEqual(none["workload"]["recompute"], "none")
        cfg = self.config("layers", extra='recompute = "layers"\n')
        r = self.plan(cfg, "--gpu-mem", "141GiB", "--host-mem", "1TiB", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual(j["workload"]["recompute"], "layers")
        drafter = j["gpus"][1]["per_worker"]["drafter.0"]
        self.assertIn("activations_recompute_layers", drafter["parts"])
        self.assertNotIn("activations", drafter["parts"])
        self.assertIn("recompute", drafter["peak_phase"])
        self.assertLess(drafter["allocated_bytes"],
                        none["gpus"][1]["per_worker"]["drafter.0"]["allocated_bytes"] * 0.8)
        self.assertEqual(sum(j["gpus"][1]["parts"].values()), j["gpus"][1]["predicted_peak_bytes"])
        r = self.plan(cfg, "--gpu-mem", "141GiB", "--host-mem", "1TiB")
        self.assertIn('[train] recompute = "layers"', r.stdout)
        self.assertIn("activations_recompute_layers", r.stdout)

        # Over budget with recompute "none": switching is one of the knobs, and its GiB is what
        # planning the changed config says.
        r = self.plan(self.config("over-rc"), "--gpu-mem", "54GiB", "--host-mem", "1TiB")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        m = re.search(r'\[train\] recompute = "layers"\s+\(now "none"\): drafter\.0 on GPU 1 at ([\d.]+) GiB of '
                      r"54\.00 GiB; everything fits \(costs throughput: .*~18-20% fewer samples/s measured on an H200\)",
                      r.stdout)
        self.assertIsNotNone(m, r.stdout)
        fixed = self.config("over-rc-fixed", extra='recompute = "layers"\n')
        r2 = self.plan(fixed, "--gpu-mem", "54GiB", "--host-mem", "1TiB", "--json")
        self.assertEqual(r2.returncode, 0, r2.stdout)
        self.assertAlmostEqual(json.loads(r2.stdout)["gpus"][1]["predicted_peak_bytes"] / 2**30, float(m.group(1)),
                               places=2)
        self.assertEqual(json.loads(r2.stdout)["suggestions"], [])

    def test_capacity_from_nvidia_smi(self):
        smi = os.path.join(self.tmp, "fake-nvidia-smi")
        with open(smi, "w") as f:
            f.write("#!/bin/sh\n"
                    "[ \"$1\" = --query-gpu=memory.total ] || exit 9\n"
                    "printf '143771\\n143771\\n'\n")
        os.chmod(smi, os.stat(smi).st_mode | stat.S_IXUSR)
        env = dict(self.env, HSRING_NVIDIA_SMI=smi)
        r = self.plan(self.config("smi"), "--host-mem", "1TiB", "--json", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual(j["gpus"][0]["capacity_bytes"], 143771 * 2**20)
        self.assertEqual(j["gpus"][0]["capacity_source"], "nvidia-smi")
        # A config that names a GPU the machine lacks does not fit.
        cfg = self.config("gpu3")
        with open(cfg) as f:
            text = f.read().replace("drafters = [1]", "drafters = [3]")
        with open(cfg, "w") as f:
            f.write(text)
        r = self.plan(cfg, "--host-mem", "1TiB", env=env)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("NOT ON THIS MACHINE", r.stdout)

    def test_unknown_capacity_is_a_usage_error(self):
        r = self.plan(self.config("nocap"), "--host-mem", "1TiB")
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("GPU capacity unknown", r.stdout)
        self.assertIn("--gpu-mem", r.stdout)

    def test_bad_input(self):
        cfg = self.config("bad")
        r = self.plan(cfg, "--bogus")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown option --bogus", r.stderr)
        r = self.plan(cfg, "--gpu-mem", "12XB")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--gpu-mem '12XB' is not a size", r.stderr)
        r = self.plan(cfg, "--gpus", "0")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--gpus '0' must be a whole number", r.stderr)
        r = self.plan()
        self.assertEqual(r.returncode, 2)
        self.assertIn("a config file is required", r.stderr)
        missing = os.path.join(self.tmp, "missing.toml")
        r = self.plan(missing, "--gpu-mem", "80GiB")
        self.assertEqual(r.returncode, 2)
        self.assertIn(f"{missing}: no such config file", r.stderr)
        # A directory was read as an empty config ("[topology] targets is required").
        r = self.plan(self.tmp, "--gpu-mem", "80GiB")
        self.assertEqual(r.returncode, 2)
        self.assertIn(f"{self.tmp} is a directory, not a config file: give a TOML config, e.g. ", r.stderr)
        self.assertNotIn("[topology]", r.stderr)
        r = self.plan(cfg, "--seconds", "5")
        self.assertEqual(r.returncode, 2)
        self.assertIn("go with --measure", r.stderr)

    def test_missing_data_set_says_how_to_plan_without_it(self):
        cfg = self.config("nodata")
        with open(cfg) as f:
            text = f.read().replace(self.data, os.path.join(self.tmp, "absent.jsonl"))
        with open(cfg, "w") as f:
            f.write(text)
        r = self.plan(cfg, "--gpu-mem", "141GiB")
        self.assertEqual(r.returncode, 2)
        self.assertIn("absent.jsonl does not exist", r.stderr)
        self.assertIn("--sample-tokens N", r.stderr)
        r = self.plan(cfg, "--gpu-mem", "141GiB", "--host-mem", "1TiB", "--sample-tokens", "3072")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("assumed samples of 3072 tokens", r.stdout)

    def test_measure_without_a_gpu(self):
        r = self.plan(self.config("measure"), "--measure", "--gpu-mem", "141GiB")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--measure needs an NVIDIA GPU, and this machine shows none", r.stderr)
        self.assertIn("--device cpu", r.stderr)

    def eagle3_config(self, name):
        """The QWEN config with an EAGLE-3 drafter (7 training-time-test steps, 32,000 draft tokens)."""
        path = os.path.join(self.tmp, name + ".toml")
        text = QWEN.format(data=self.data, mbt=6144).replace(
            "[drafter]\nnum_layers = 5\n", '[drafter]\ntype = "eagle3"\nnum_layers = 1\nttt_steps = 7\ndraft_vocab = 32000\n')
        self.assertIn('type = "eagle3"', text)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_eagle3_demo_fits(self):
        r = self.plan(os.path.join(ROOT, "config", "demo-eagle3.toml"), "--host-mem", "8GiB")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("drafter  EAGLE-3: micro-batches of", r.stdout)
        self.assertIn("rows x 3 training-time-test steps, draft vocabulary 256", r.stdout)
        self.assertIn("drafter.0 on the CPU", r.stdout)
        self.assertIn("everything fits", r.stdout)

    def test_eagle3_json(self):
        r = self.plan(self.eagle3_config("eagle3-json"), "--gpu-mem", "141GiB", "--host-mem", "1TiB", "--json")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual(j["workload"]["drafter_type"], "eagle3")
        self.assertEqual(j["workload"]["ttt_steps"], 7)
        self.assertEqual(j["workload"]["draft_vocab"], 32000)
        worst = j["workload"]["worst_micro_batch"]
        self.assertEqual(worst["rows"], worst["tokens"] - worst["samples"])
        drafter = j["gpus"][1]
        self.assertEqual(sum(drafter["parts"].values()), drafter["predicted_peak_bytes"])
        for part in ("embedding_and_lm_head", "draft_lm_head", "fp32_master_weights", "bf16_weight_casts",
                     "adamw_state", "activations", "attention", "ttt_logits", "inflight_slots"):
            self.assertIn(part, drafter["parts"])
        self.assertNotIn("loss_chunk_logits", drafter["parts"])

    def test_eagle3_measure_without_a_gpu(self):
        """--measure takes EAGLE-3 drafters too (hsring-bench drafter --config trains the config's type):
        without a GPU it says what DFlash's says (test_plan_measure_cpu.py measures one on the CPU)."""
        r = self.plan(self.eagle3_config("eagle3-measure"), "--measure", "--gpu-mem", "141GiB")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--measure needs an NVIDIA GPU, and this machine shows none", r.stderr)
        self.assertNotIn("DFlash drafters only", r.stderr)

if __name__ == "__main__":
    unittest.main(verbosity=2)
