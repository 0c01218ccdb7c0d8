"""Helpers for the supervisor's multi-process tests: a run in a temporary directory with a
synthetic-mode config and a small generated data set, `hsring run` as a subprocess, and the
control commands as subprocesses (the way a user runs them).

Every test uses its own run name (so its own ring and ledger in /dev/shm) and removes what it
made, whatever happens."""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

BUILD = os.environ["HSRING_BUILD_ROOT"]
HSRING = os.path.join(BUILD, "src", "cli", "hsring")


class TestFailure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise TestFailure(message)


def write_data(path, samples, seed=7):
    """Pre-tokenized JSONL (include/hsring/dataset.hpp): 4..40 tokens, the first third unmasked."""
    r = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(samples):
            n = r.randint(4, 40)
            ids = [r.randint(0, 500) for _ in range(n)]  # preset:tiny has 512 tokens, 511 = mask
            f.write(json.dumps({"input_ids": ids, "loss_mask": [0] * (n // 3) + [1] * (n - n // 3)}) + "\n")


def free_port():
    """A TCP port the kernel has just handed out (free for the next moments)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def distributed(port, nnodes=1, node_rank=0, timeout_s=30):
    return (f"[distributed]\nnnodes = {nnodes}\nnode_rank = {node_rank}\nmaster_addr = \"127.0.0.1\"\n"
            f"master_port = {port}\ntimeout_s = {timeout_s}\n")


def process_gone(pid):
    """Exited (a zombie counts: it holds nothing any more)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state in ("Z", "X")
    except FileNotFoundError:
        return True


class Run:
    def __init__(self, tag, targets='["cpu", "cpu"]', drafters='["cpu"]', samples=200, epochs=2,
                 supervisor="", ring="", run_extra="", step_ms=40, env=None, tail="", data_extra="", train_extra=""):
        self.tmp = tempfile.mkdtemp(prefix=f"hsring-sup-{tag}-")
        self.name = f"t{tag}{os.getpid()}"
        self.ring = f"hsring-{self.name}"
        self.run_dir = os.path.join(self.tmp, "run")
        self.config = os.path.join(self.tmp, "run.toml")
        self.data = os.path.join(self.tmp, "data.jsonl")
        write_data(self.data, samples)
        self.env = dict(os.environ)
        self.env["HSRING_SYNTH_STEP_MS"] = str(step_ms)
        self.env.update(env or {})
        self.proc = None
        self.lines = []
        self._reader = None
        self.tail = tail
        self.drafter_extra, self.slot_tokens, self.model, self.target_extra = "", 128, "preset:tiny", ""
        self.data_extra, self.train_extra = data_extra, train_extra
        self.write_config(targets, drafters, epochs, supervisor, ring, run_extra)

    def write_config(self, targets='["cpu", "cpu"]', drafters='["cpu"]', epochs=2, supervisor="", ring="",
                     run_extra=""):
        with open(self.config, "w") as f:
            f.write(f"""
[run]
name = "{self.name}"
run_dir = "{self.run_dir}"
mode = "synthetic"
seed = 5
{run_extra}
[topology]
targets = {targets}
drafters = {drafters}
[ring]
slots = 4
slot_tokens = {self.slot_tokens}
huge_pages = "off"
{ring}
[target]
model = "{self.model}"
{self.target_extra}
[drafter]
num_layers = 2
{self.drafter_extra}
[data]
path = "{self.data}"
epochs = {epochs}
{self.data_extra}
[train]
checkpoint_every = 5
{self.train_extra}
[supervisor]
status_interval_s = 0.5
backoff_initial_s = 0.1
backoff_max_s = 0.5
stop_timeout_s = 20
{supervisor}
{self.tail}
""")

    # --- the supervisor -------------------------------------------------------------------
    def start(self, *args, env=None):
        e = dict(self.env)
        e.update(env or {})
        self.lines = []
        self.proc = subprocess.Popen([HSRING, "run", self.config, *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=e, cwd=self.tmp)
        self._reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True)
        self._reader.start()
        return self.proc

    def _read(self, proc):
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait(self, timeout=60):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise TestFailure(f"hsring run did not end within {timeout} s; its output:\n" + self.output())
        self._reader.join(5)
        return rc

    def output(self):
        return "\n".join(self.lines)

    def expect_exit(self, code, timeout=60):
        rc = self.wait(timeout)
        check(rc == code, f"hsring run exited {rc}, expected {code}; its output:\n{self.output()}")

    # --- the control commands -------------------------------------------------------------
    def cli(self, *args, run_dir=True, expect=0, timeout=60):
        cmd = [HSRING, *args] + (["--run-dir", self.run_dir] if run_dir else [])
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.tmp, env=self.env)
        if expect is not None:
            check(r.returncode == expect, f"`{' '.join(cmd)}` exited {r.returncode}, expected {expect}\n"
                                          f"stdout: {r.stdout}\nstderr: {r.stderr}")
        return r

    def status(self):
        return json.loads(self.cli("status", "--json").stdout)

    def worker(self, status, name):
        return next(w for w in status["workers"] if w["name"] == name)

    def wait_for(self, pred, what, timeout=30, interval=0.05):
        end = time.time() + timeout
        last = None
        while time.time() < end:
            try:
                last = self.status()
                if pred(last):
                    return last
            except (TestFailure, json.JSONDecodeError) as e:
                last = str(e)
            if self.proc and self.proc.poll() is not None:
                raise TestFailure(f"hsring run ended while waiting for {what}; its output:\n" + self.output())
            time.sleep(interval)
        raise TestFailure(f"timed out after {timeout} s waiting for {what}; last status: {last}")

    def wait_for_fault_hold(self, name, point, state, timeout=30):
        """The status once `name` sits in an HSRING_FAULT `hold` at `point` while holding a slot in
        `state`. The fault's own log line says the hold began: a status alone can show a slot held
        by an ordinary write or read that has ended by the time the test acts on it."""
        marker = f"injected fault in {name} at pass"
        return self.wait_for(lambda s: any(marker in l and f"point '{point}'" in l for l in list(self.lines)) and
                             self.worker(s, name)["holds"][state] > 0,
                             f"{name} held by HSRING_FAULT at '{point}' with a {state} slot", timeout)

    def wait_running(self, timeout=30):
        return self.wait_for(lambda s: all(w["state"] == "running" for w in s["workers"]), "every worker running",
                             timeout)

    def verify(self, expect=0):
        return self.cli("ledger", "verify", self.run_dir, run_dir=False, expect=expect)

    def record(self):
        with open(os.path.join(self.run_dir, "run.json")) as f:
            return json.load(f)

    def shm_exists(self):
        """(ring exists, ledger exists); the status board always goes with the ring."""
        ring = os.path.exists(f"/dev/shm/{self.ring}")
        status = os.path.exists(f"/dev/shm/{self.ring}-status")
        check(status == ring, f"the status board {self.ring}-status exists: {status}, the ring: {ring}")
        return ring, os.path.exists(f"/dev/shm/{self.ring}-ledger")

    def cleanup(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        # Workers of a killed supervisor exit by themselves (PDEATHSIG); give them a moment.
        try:
            rec = self.record()
            for w in rec.get("workers", []):
                for _ in range(100):
                    if process_gone(w["pid"]):
                        break
                    time.sleep(0.05)
                else:
                    os.kill(w["pid"], signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass
        subprocess.run([HSRING, "ring", "rm", self.ring, "--force"], capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


def main(tests):
    """Runs the named test functions in order; each gets a fresh harness via its own Run."""
    only = sys.argv[1:]
    failed = 0
    for t in tests:
        if only and t.__name__ not in only:
            continue
        t0 = time.time()
        try:
            t()
            print(f"ok    {t.__name__} ({time.time() - t0:.1f} s)", flush=True)
        except TestFailure as e:
            failed += 1
            print(f"FAIL  {t.__name__}: {e}", flush=True)
    sys.exit(1 if failed else 0)
