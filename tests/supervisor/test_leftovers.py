"""Never trust left-over state (DESIGN.md invariant 8), with real `hsring run` processes in
synthetic mode: the ring and the ledger of another run dir, of another user, of other data; a
ledger that disagrees with the checkpoint; `--fresh` against a live run; links planted in the run
dir; a run dir of another user or open to others. Each case names its finding of issue 12."""
import os
import re
import shutil
import signal
import stat
import subprocess

from harness import HSRING, Run, check, main

ROOT = os.geteuid() == 0
OTHER_UID = 54321  # no such user: a stranger's files


def shm_files(r):
    return [f"/dev/shm/{r.ring}", f"/dev/shm/{r.ring}-ledger", f"/dev/shm/{r.ring}-status"]


def stopped_now_after(r, step):
    """A run killed at once (hsring stop --now) once the drafter passed `step`: ring and ledger kept."""
    r.start()
    r.wait_for(lambda s: (s["drafter"]["step"] or 0) >= step, f"drafter step >= {step}")
    r.cli("stop", "--now")
    r.expect_exit(0)
    check(r.shm_exists() == (True, True), "stop --now keeps the ring and the ledger")


def test_a_failed_write_reissues_its_samples():
    # Finding 7: an exception in a target's write left its samples taken: the run never ended.
    r = Run("f7", step_ms=5, env={"HSRING_FAULT": "target.0:write:3,target.1:write:5"})
    try:
        r.start()
        r.expect_exit(0, timeout=90)
        out = r.output()
        check(out.count("hsring-synth-worker failed: HSRING_FAULT") == 2 and "complete" in out, out)
        check(re.search(r"target\.0 \(pid \d+\) ended: exit code 1", out), out)
        r.verify()
    finally:
        r.cleanup()


if __name__ == "__main__":
    main([test_a_failed_write_reissues_its_samples])
