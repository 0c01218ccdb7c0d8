"""`hsring drill` on CI: at least 200 random faults (SIGKILL and SIGSTOP of workers and of the
supervisor, graceful restarts, injected faults) over a few synthetic runs, with one drafter rank
and with two (a data-parallel gang); every run must complete and verify (0 lost, 0 doubled) and
end with the weights of an unkilled run of the same config (the synthetic drafter's state chains
its steps in order, so a step that held other samples, or steps in another order, would differ)."""
import os
import re
import subprocess
import time

from harness import HSRING, Run, check, main


def drill(r, faults, seed):
    t0 = time.time()
    res = subprocess.run([HSRING, "drill", r.config, "--faults", str(faults), "--seed", str(seed), "--step-ms", "30",
                          "--gap-ms", "150", "--work-dir", os.path.join(r.tmp, "drill"), "--timeout", "240",
                          "--stall-s", "90"], capture_output=True, text=True, timeout=560, cwd=r.tmp)
    out = res.stdout + res.stderr
    print(f"note: {faults} faults in {time.time() - t0:.0f} s; " +
          " | ".join(l for l in out.splitlines() if l.startswith(("drill:", "samples:"))), flush=True)
    check(res.returncode == 0, f"hsring drill exited {res.returncode}:\n{out}")
    m = re.search(r"drill: (\d+) faults survived in (\d+) runs", out)
    check(m and int(m.group(1)) >= faults and int(m.group(2)) >= 2, out)
    m2 = re.search(r"samples: [1-9]\d* passes verified, 0 lost, 0 doubled; exports equal to the unkilled run's: "
                   r"(\d+) of (\d+)", out)
    check(m2 and m2.group(1) == m2.group(2), out)
    check("ended with the unkilled run's weights" in out, out)
    # The drill's total (each run's own line lists only what that run was dealt).
    total = next((l for l in out.splitlines() if "faults survived in" in l), "")
    kinds = re.search(r"(\d+) SIGKILL of a worker, (\d+) SIGSTOP of a worker, (\d+) graceful worker restarts, (\d+) "
                      r"SIGKILL of the supervisor, (\d+) SIGSTOP of the supervisor, (\d+) injected", total)
    check(kinds and all(int(k) > 0 for k in kinds.groups()), "every kind of fault was dealt:\n" + out)
    return int(m.group(1))


def test_drill_one_drafter():
    r = Run("dr1", samples=300)
    try:
        drill(r, 110, 11)
    finally:
        r.cleanup()


def test_drill_two_drafter_ranks():
    r = Run("dr2", samples=300, drafters='["cpu", "cpu"]')
    try:
        drill(r, 110, 12)
    finally:
        r.cleanup()


def test_drill_resize_changes_the_drafter_count_between_supervisors():
    # Issue 53: each supervisor start of a drilled run draws another count of drafter ranks (1..3,
    # a step of 6 slots); still 0 lost, 0 doubled, and the unkilled run's weights.
    r = Run("drz", samples=300, drafters='["cpu", "cpu"]')
    try:
        res = subprocess.run([HSRING, "drill", r.config, "--faults", "30", "--seed", "2", "--step-ms", "30",
                              "--gap-ms", "150", "--work-dir", os.path.join(r.tmp, "drill"), "--timeout", "240",
                              "--stall-s", "90", "--resize"], capture_output=True, text=True, timeout=400, cwd=r.tmp)
        out = res.stdout + res.stderr
        check(res.returncode == 0, f"hsring drill --resize exited {res.returncode}:\n{out}")
        check(re.search(r"samples: [1-9]\d* passes verified, 0 lost, 0 doubled; exports equal to the unkilled run's: "
                        r"(\d+) of \1", out), out)
        # Some run changed its drafter count under a supervisor SIGKILL.
        per_run = [list(map(int, m.split())) for m in
                   re.findall(r"^run \d+: .*drafter ranks per supervisor start ([\d ]+)\)", out, re.M)]
        check(any(len(set(c)) > 1 for c in per_run), "a run resized mid-run:\n" + out)
        res = subprocess.run([HSRING, "drill", r.config, "--resize", "--mode", "train"], capture_output=True,
                             text=True, timeout=60, cwd=r.tmp)
        check(res.returncode == 2 and "cannot be combined with --mode train" in res.stderr, res.stdout + res.stderr)
    finally:
        r.cleanup()


if __name__ == "__main__":
    main([test_drill_one_drafter, test_drill_two_drafter_ranks,
          test_drill_resize_changes_the_drafter_count_between_supervisors])
