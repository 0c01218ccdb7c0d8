"""Data-parallel drafters (the drafter gang over c10d/Gloo) with real processes, synthetic mode:
several drafter ranks on one machine, two machines simulated on this host (two `hsring run`, each
with its own ring, ledger and run dir, loopback master), ranks and machines SIGKILLed, bad input.

Exactly once is checked twice: `hsring ledger verify` over every machine's run dir (the train
logs), and the synthetic drafter's checksum state in the master's final checkpoint, which the
ranks sum over the gang like gradients: it must equal the sum over every sample pass of every
machine exactly once."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "supervisor"))
from harness import HSRING, Run, TestFailure, check, distributed, free_port, main  # noqa: E402

MASK = (1 << 64) - 1


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def synth_mix(x):
    return mix64((x + 0x9E3779B97F4A7C15) & MASK)


def expected_state(samples, epochs, nnodes):
    """The checksum of every sample pass exactly once: machine m's ledger has share(m) x epochs
    positions; each contributes mix(pos ^ m << 48) (SynthDrafter::mix_of)."""
    total, count = 0, 0
    for m in range(nnodes):
        share = samples // nnodes + (1 if m < samples % nnodes else 0)
        for p in range(share * epochs):
            total = (total + synth_mix(p ^ (m << 48))) & MASK
            count += 1
    return total, count


def final_state(run_dir):
    with open(os.path.join(run_dir, "checkpoints", "latest")) as f:
        step = int(f.read())
    with open(os.path.join(run_dir, "checkpoints", f"step-{step:08}", "synth_state.txt")) as f:
        s, c = f.read().split()[:2]  # sum, count (then the order-sensitive chain)
    return int(s), int(c)


def verify(*run_dirs, expect=0):
    r = subprocess.run([HSRING, "ledger", "verify", *run_dirs], capture_output=True, text=True, timeout=60)
    check(r.returncode == expect, f"ledger verify exited {r.returncode}, expected {expect}:\n{r.stdout}{r.stderr}")
    return r


def machines(tag, port, nnodes=2, drafters='["cpu"]', targets='["cpu"]', samples=150, epochs=2, timeout_s=30,
             supervisor="", step_ms=30, **kw):
    """nnodes `hsring run`s of one run, each with its own name, ring, run dir (and the same data)."""
    runs = []
    for n in range(nnodes):
        r = Run(f"{tag}{n}", targets=targets, drafters=drafters, samples=samples, epochs=epochs, step_ms=step_ms,
                supervisor=supervisor, tail=distributed(port, nnodes, n, timeout_s), **kw)
        runs.append(r)
    return runs


def twin_of_machine_1(tag, port, nnodes, samples, timeout_s):
    """A second `hsring run` that claims node rank 1 of the same run (another name and run dir)."""
    return Run(tag, targets='["cpu"]', drafters='["cpu"]', samples=samples, epochs=1, step_ms=30,
               tail=distributed(port, nnodes, 1, timeout_s))


def write_heldout(path, samples):
    from harness import write_data
    write_data(path, samples, seed=99)


def test_held_out_evaluation_spans_every_machine_and_trains_nothing():
    port = free_port()
    heldout = "/tmp/hsring-gang-heldout-%d.jsonl" % os.getpid()
    write_heldout(heldout, 23)
    runs = machines("ge", port, drafters='["cpu", "cpu"]', samples=120, epochs=2, step_ms=20,
                    data_extra=f'eval_path = "{heldout}"', train_extra="eval_every = 10")
    try:
        for r in runs:
            r.start()
        for r in runs:
            r.expect_exit(0, timeout=180)
        verify(runs[0].run_dir, runs[1].run_dir)  # held-out samples never enter the ledger
        with open(os.path.join(runs[0].run_dir, "metrics.jsonl")) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        evals = [e for e in lines if "eval" in e]
        last_step = max(r["step"] for r in lines if "loss" in r)
        check(evals and all(e["eval"]["samples"] == 23 for e in evals), f"every round covers the 23 held-out samples "
              f"of both machines (12 + 11): {evals}")
        check([e["step"] for e in evals if not e["eval"]["final"]] == list(range(10, last_step, 10))[:len(evals) - 1],
              f"a round after every 10th step: {[e['step'] for e in evals]}")
        check(evals[-1]["eval"]["final"] and evals[-1]["step"] == last_step, f"and one of the final weights: {evals[-1]}")
    finally:
        os.unlink(heldout)
        for r in runs:
            r.cleanup()


def test_two_drafter_ranks_on_one_machine_train_every_sample_once():
    port = free_port()
    r = Run("g2", drafters='["cpu", "cpu"]', samples=200, epochs=2, step_ms=20, tail=distributed(port))
    try:
        r.start()
        st = r.wait_running()
        names = [(w["name"], w["role"], w["rank"]) for w in st["workers"]]
        check(("drafter.0", "drafter", 0) in names and ("drafter.1", "drafter", 1) in names,
              f"hsring status lists every local drafter rank: {names}")
        r.expect_exit(0)
        r.verify()
        check(final_state(r.run_dir) == expected_state(200, 2, 1), "the gang's summed state holds every pass once")
        out = r.output()
        check(re.search(r"drafter gang formed: rank 1 of 2", out), "drafter.1 joined the gang:\n" + out)
        with open(os.path.join(r.run_dir, "metrics.jsonl")) as f:
            rows = [r for r in (json.loads(line) for line in f if line.strip()) if "step_ms" in r]
        check(all(row["world"] == 2 and len(row["rank_data_wait_ms"]) == 2 for row in rows), str(rows[:2]))
        check(all(row["slots"] <= 2 for row in rows), "one slot per rank per step")
    finally:
        r.cleanup()


def test_sigkill_of_one_rank_restarts_the_gang_and_loses_nothing():
    port = free_port()
    r = Run("gk", drafters='["cpu", "cpu"]', samples=300, epochs=2, step_ms=30, tail=distributed(port))
    try:
        r.start()
        r.wait_running()
        r.wait_for(lambda s: (s["drafter"]["step"] or 0) >= 7, "drafter step 7 (a checkpoint at 5)")
        old = {w["name"]: w["pid"] for w in r.status()["workers"]}
        r.cli("kill", "drafter.1")
        st = r.wait_for(lambda s: r.worker(s, "drafter.1")["restarts"] == 1 and
                        all(r.worker(s, d)["state"] == "running" and r.worker(s, d)["pid"] != old[d]
                            for d in ("drafter.0", "drafter.1")), "the whole gang restarted", timeout=60)
        check(r.worker(st, "drafter.1")["last_exit"] == "killed by SIGKILL", str(st["workers"]))
        r.expect_exit(0, timeout=120)
        out = r.output()
        check("restarting the drafter gang (2 ranks)" in out, out)
        check(re.search(r"drafter\.0 \(pid \d+\): SIGKILL, its gang restarts", out), out)
        r.verify()
        check(final_state(r.run_dir) == expected_state(300, 2, 1), "nothing lost or doubled in the weights")
    finally:
        r.cleanup()


def test_two_machines_train_one_run_and_a_killed_drafter_recovers_both():
    port = free_port()
    runs = machines("gm", port, samples=151, epochs=2, step_ms=25)
    try:
        for r in runs:
            r.start()
        for r in runs:
            r.wait_running(timeout=60)
        # Machine 1's drafter dies: machine 0's collectives fail and its supervisor restarts its
        # gang too; both meet again at the rendezvous and resume from the last common checkpoint.
        runs[0].wait_for(lambda s: (s["drafter"]["step"] or 0) >= 7, "step 7")
        runs[1].cli("kill", "drafter.0")
        for r in runs:
            r.expect_exit(0, timeout=180)
        out0, out1 = runs[0].output(), runs[1].output()
        check(re.search(r"drafter\.0 \(pid \d+\) ended: exit code 1", out0), "machine 0's drafter saw the gang break:\n" + out0)
        check("restarting the drafter gang" in out0 and "restarting the drafter gang" in out1, out0 + out1)
        check("this machine trains 76 of the 151 samples" in out0 and "trains 75 of the 151" in out1, out0 + out1)
        verify(runs[0].run_dir, runs[1].run_dir)
        r = verify(runs[0].run_dir, expect=2)
        check("the run dirs of machine(s) 1 are missing" in r.stderr, r.stderr)
        check(final_state(runs[0].run_dir) == expected_state(151, 2, 2), "the master's weights hold both machines once")
        check(os.path.isdir(os.path.join(runs[0].run_dir, "drafter")), "the master exports")
        check(not os.path.exists(os.path.join(runs[1].run_dir, "metrics.jsonl")), "only the master writes metrics")
    finally:
        for r in runs:
            r.cleanup()


def test_a_machine_that_dies_stops_the_other_with_a_message_and_both_resume_together():
    port = free_port()
    runs = machines("gd", port, samples=200, epochs=2, step_ms=30, timeout_s=4,
                    supervisor="max_restarts = 1\nrestart_window_s = 300")
    try:
        for r in runs:
            r.start()
        runs[0].wait_running(timeout=60)
        runs[0].wait_for(lambda s: (s["drafter"]["step"] or 0) >= 7, "step 7")
        # Machine 1 is gone at once: its supervisor and every worker, SIGKILL.
        pids = [w["pid"] for w in runs[1].status()["workers"] if w["pid"]]
        runs[1].proc.kill()
        for p in pids:
            os.kill(p, signal.SIGKILL)
        runs[1].wait()
        t0 = time.time()
        runs[0].expect_exit(1, timeout=120)
        out = runs[0].output()
        check(re.search(r"drafter ranks did not join within 4 s .*rank 1 \(machine 1, drafter\.0\)", out),
              "machine 0 names the machine that is gone:\n" + out)
        print(f"machine 0 stopped {time.time() - t0:.1f} s after machine 1 died", flush=True)
        # Both machines start again: they resume together from the last common checkpoint.
        for r in runs:
            r.start()
        for r in runs:
            r.expect_exit(0, timeout=180)
        verify(runs[0].run_dir, runs[1].run_dir)
        check(final_state(runs[0].run_dir) == expected_state(200, 2, 2), "resumed without loss or doubling")
    finally:
        for r in runs:
            r.cleanup()


def test_stop_and_restart_on_one_machine_act_on_the_whole_run():
    port = free_port()
    runs = machines("gs", port, samples=200, epochs=2, step_ms=30)
    try:
        for r in runs:
            r.start()
        runs[0].wait_running(timeout=60)
        # `hsring restart drafter.0` on machine 1: the gang checkpoints and starts again everywhere.
        runs[0].wait_for(lambda s: (s["drafter"]["step"] or 0) >= 4, "step 4")
        runs[1].cli("restart", "drafter.0")
        runs[0].wait_for(lambda s: r_restarted(runs[0], s), "machine 0's drafter restarted with the gang", timeout=60)
        # `hsring stop` on machine 1: both machines stop after a common checkpoint, exit 0.
        runs[0].wait_for(lambda s: (s["drafter"]["step"] or 0) >= 12, "step 12")
        runs[1].cli("stop")
        for r in runs:
            r.expect_exit(0, timeout=120)
        out0 = runs[0].output()
        check("drafter.0 stopped: another machine of the run stops it" in out0, out0)
        check(re.search(r"drafter\.0 \(pid \d+\) ended: exit code 5", out0), "a peer's restart is not a failure:\n" + out0)
        # Both start again and finish the run together, exactly once.
        for r in runs:
            r.start()
        for r in runs:
            r.expect_exit(0, timeout=180)
        verify(runs[0].run_dir, runs[1].run_dir)
        check(final_state(runs[0].run_dir) == expected_state(200, 2, 2), "resumed without loss or doubling")
    finally:
        for r in runs:
            r.cleanup()


def r_restarted(run, status):
    d = run.worker(status, "drafter.0")
    return d["restarts"] >= 1 and d["state"] == "running"


def stop_line(out):
    """The supervisor's own line for a worker's user error (it repeats the worker's message)."""
    m = re.search(r"^.*drafter\.\d stopped the run with a user error \(exit code 3\): (.*)$", out, re.M)
    return m.group(1) if m else None


def test_bad_gang_input_is_one_clear_message():
    # A machine 1 whose master_port is wrong (nobody serves it): a user error within timeout_s
    # (first start), and the supervisor repeats the worker's message, not the last line of a
    # c10d backtrace (it said ")").
    port = free_port()
    lone = Run("gu", targets='["cpu"]', samples=50, epochs=1, tail=distributed(port, 2, 1, timeout_s=3))
    try:
        t0 = time.time()
        lone.start()
        lone.expect_exit(3, timeout=60)
        check(time.time() - t0 < 30, "the error comes within the timeout")
        out = lone.output()
        check(re.search(r"cannot reach the master 127\.0\.0\.1:\d+ within 3 s", out), out)
        line = stop_line(out)
        check(line and line.startswith(f"cannot reach the master 127.0.0.1:{port} within 3 s ([distributed] timeout_s)"),
              f"the supervisor's line names the master and the key: {line!r}\n{out}")
        with open(os.path.join(lone.run_dir, "logs", "drafter.0.log")) as f:
            log = f.read()
        # (torch's TCPStore logs its own retries, with backtraces, above it.)
        lines = log.rstrip("\n").split("\n")
        check(" drafter.0 E cannot reach the master" in lines[-2] and lines[-1].startswith("--- hsring: drafter.0"),
              "the worker's error is its last line, one line without a C++ backtrace:\n" + log)
    finally:
        lone.cleanup()
    # Machines whose configs differ: machine 1 compares itself with the master before it claims
    # a rank, names the key, and both stop with exit 3.
    port = free_port()
    runs = machines("gc", port, samples=50, epochs=1, timeout_s=30)
    try:
        runs[1].write_config(targets='["cpu"]', drafters='["cpu"]', epochs=2)  # epochs differ
        for r in runs:
            r.start()
        for r in runs:
            r.expect_exit(3, timeout=60)
        want = "[data] epochs is 2 on machine 1, 1 on machine 0 (the master)"
        for r in runs:
            check(want in (stop_line(r.output()) or ""), r.output())
    finally:
        for r in runs:
            r.cleanup()
    # One drafter per machine on machine 0, two on machine 1: they would compute different global
    # ranks (a "duplicate node rank" or a rank that never comes); the message names the key.
    port = free_port()
    runs = machines("gw", port, samples=50, epochs=1, timeout_s=5)
    try:
        runs[1].write_config(targets='["cpu"]', drafters='["cpu", "cpu"]', epochs=1)
        for r in runs:
            r.start()
        for r in runs:
            r.expect_exit(3, timeout=60)
        want = "[topology] drafters (count) is 2 on machine 1, 1 on machine 0 (the master)"
        for r in runs:
            check(want in (stop_line(r.output()) or ""), r.output())
    finally:
        for r in runs:
            r.cleanup()
    # A held-out set that is missing or malformed: named with its line, nothing started.
    r = Run("gh", data_extra='eval_path = "heldout.jsonl"', train_extra="eval_every = 5")
    try:
        res = r.cli("run", r.config, run_dir=False, expect=2)
        check("heldout.jsonl" in res.stderr and "cannot" in res.stderr, res.stderr)
        with open(os.path.join(r.tmp, "heldout.jsonl"), "w") as f:
            f.write('{"input_ids": [1, 2, 3]}\n{"input_ids": [1, 2, "x"]}\n')
        res = r.cli("run", r.config, run_dir=False, expect=2)
        check(re.search(r"heldout\.jsonl:2: ", res.stderr), res.stderr)
        check(r.shm_exists()[0] is False, "nothing is created for a refused held-out set")
    finally:
        r.cleanup()
    # More GPU places than the machine has GPUs (nvidia-smi, here a fake listing one GPU).
    r = Run("gp", targets='["cpu"]', drafters='[0, 1]', tail=distributed(free_port()))
    try:
        smi = os.path.join(r.tmp, "nvidia-smi")
        with open(smi, "w") as f:
            f.write("#!/bin/sh\necho 81559\n")
        os.chmod(smi, 0o755)
        res = subprocess.run([HSRING, "run", r.config], capture_output=True, text=True, timeout=30,
                             env=dict(r.env, HSRING_NVIDIA_SMI=smi))
        check(res.returncode == 2 and "places drafter.1 on GPU 1, but this machine has 1 GPU (0..0" in res.stderr,
              res.stderr)
    finally:
        r.cleanup()
    # node_rank >= nnodes, from the launcher's variables.
    r = Run("gn", tail=distributed(free_port()))
    try:
        env = dict(r.env, NNODES="2", NODE_RANK="2")
        res = subprocess.run([HSRING, "run", r.config], capture_output=True, text=True, env=env, timeout=30)
        check(res.returncode == 2 and "node rank 2 (from NODE_RANK) is not below the number of machines 2 (from NNODES)"
              in res.stderr, res.stderr)
        res = subprocess.run([HSRING, "run", r.config, "--node-rank", "5"], capture_output=True, text=True,
                             env=dict(r.env), timeout=30)
        check(res.returncode == 2 and "(from --node-rank)" in res.stderr, res.stderr)
    finally:
        r.cleanup()


def test_two_machines_with_one_node_rank_one_is_refused():
    # Machines 0 and 1 of three, and a second machine 1, before machine 2 comes: the round cannot
    # close, so whichever of the two machines 1 claims rank 1 second finds the first one's claim
    # alive (its keep-alive moves), exits 3, and its supervisor says why. Then machine 2 comes and
    # the gang of the first machine 1 trains the run to the end.
    port = free_port()
    runs = machines("gn", port, nnodes=3, samples=60, epochs=1, timeout_s=30)
    twin = twin_of_machine_1("gn1b", port, 3, 60, 30)
    try:
        for r in runs[:2] + [twin]:
            r.start()
        end = time.time() + 60
        ended = None
        while ended is None and time.time() < end:
            ended = next((r for r in (runs[1], twin) if r.proc.poll() is not None), None)
            time.sleep(0.1)
        check(ended is not None, "one of the two machines 1 stops:\n" + runs[1].output() + twin.output())
        ended.expect_exit(3)
        line = stop_line(ended.output()) or ""
        check("two machines have the same node rank 1 ([distributed] node_rank, NODE_RANK or --node-rank must "
              "differ per machine)" in line, ended.output())
        other = twin if ended is runs[1] else runs[1]
        check(other.proc.poll() is None, "the machine that came first stays in the rendezvous")
        runs[2].start()
        for r in (runs[0], other, runs[2]):
            r.expect_exit(0, timeout=120)
    finally:
        for r in runs + [twin]:
            r.cleanup()


def test_a_completed_run_restarted_on_one_machine_says_so_and_a_late_twin_is_refused():
    # Machine 1 of a completed 2-machine run, started again alone: "already complete" at once (it
    # waited 70 s for the master, then "cannot reach the master"). A second machine 1 that comes
    # while the gang trains is told it duplicates a node rank (it was told "cannot reach the master").
    port = free_port()
    runs = machines("gc", port, samples=600, epochs=1, step_ms=30, timeout_s=20)
    twin = twin_of_machine_1("gc1b", port, 2, 600, 20)
    try:
        for r in runs:
            r.start()
        runs[0].wait_running(timeout=60)
        runs[0].wait_for(lambda s: (s["drafter"]["step"] or 0) >= 2, "step 2")
        t0 = time.time()
        twin.start()
        twin.expect_exit(3, timeout=60)
        took = time.time() - t0
        line = stop_line(twin.output()) or ""
        check("two machines have the same node rank 1" in line, twin.output())
        check(took < 15, f"the twin was refused after {took:.1f} s, before timeout_s (20 s)")
        check(runs[0].proc.poll() is None, "the gang trains on")
        for r in runs:
            r.expect_exit(0, timeout=120)
        verify(runs[0].run_dir, runs[1].run_dir)
        t0 = time.time()
        runs[1].start()
        runs[1].expect_exit(0, timeout=60)
        took = time.time() - t0
        out = runs[1].output()
        check("already trained" in out and "cannot reach" not in out, out)
        check(took < 15, f"machine 1 alone took {took:.1f} s to say the run is complete")
        verify(runs[0].run_dir, runs[1].run_dir)
    finally:
        for r in runs + [twin]:
            r.cleanup()


if __name__ == "__main__":
    main([test_two_drafter_ranks_on_one_machine_train_every_sample_once,
          test_sigkill_of_one_rank_restarts_the_gang_and_loses_nothing,
          test_two_machines_train_one_run_and_a_killed_drafter_recovers_both,
          test_a_machine_that_dies_stops_the_other_with_a_message_and_both_resume_together,
          test_held_out_evaluation_spans_every_machine_and_trains_nothing,
          test_stop_and_restart_on_one_machine_act_on_the_whole_run,
          test_bad_gang_input_is_one_clear_message,
          test_two_machines_with_one_node_rank_one_is_refused,
          test_a_completed_run_restarted_on_one_machine_says_so_and_a_late_twin_is_refused])
