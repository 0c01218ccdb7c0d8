"""`hsring run` end to end with the synthetic workers: a run completes and verifies; status
--json parses; `hsring restart` restarts a worker; `hsring stop` drains and exits 0 (and a later
run completes from the checkpoint); SIGINT stops gracefully, a second SIGINT at once."""
import os
import re
import signal
import stat
import time

from harness import Run, check, main


def test_run_completes_and_verifies():
    r = Run("ok")
    try:
        r.start()
        st = r.wait_running()
        for w in st["workers"]:
            check({"name", "pid", "state", "restarts"} <= set(w), f"worker entry lacks keys: {w}")
        check([w["name"] for w in st["workers"]] == ["target.0", "target.1", "drafter.0"], str(st["workers"]))
        check({"free", "writing", "ready", "reading"} <= set(st["ring"]), f"ring entry lacks keys: {st['ring']}")
        check(st["ring"]["slots"] == 4, str(st["ring"]))
        mode = stat.S_IMODE(os.stat(os.path.join(r.run_dir, "control.sock")).st_mode)
        check(mode == 0o600, f"control.sock has mode {oct(mode)}")
        mode = stat.S_IMODE(os.stat(r.run_dir).st_mode)
        check(mode == 0o700, f"a new run dir is made private (0700), not {oct(mode)}")
        text = r.cli("status").stdout
        check("drafter.0" in text and "ring " in text and "ledger " in text, text)
        r.expect_exit(0)
        out = r.output()
        check("complete (verified)" in out and "400 of 400 sample passes trained" in out, out)
        check("[drafter.0] " in out and "[target.1] " in out, "worker lines are mirrored with a [name] prefix")
        check(r.shm_exists() == (False, False), "ring and ledger are removed at the end (keep_ring = false)")
        check(not os.path.exists(os.path.join(r.run_dir, "control.sock")), "the control socket is removed")
        rec = r.record()
        check(rec["end"]["exit_code"] == 0 and rec["samples"] == 200 and rec["epochs"] == 2, str(rec))
        check(rec["ring"] == r.ring and rec["ledger"] == r.ring + "-ledger", str(rec))
        for name in ("target.0", "target.1", "drafter.0"):
            log = os.path.join(r.run_dir, "logs", name + ".log")
            check(os.path.getsize(log) > 0, f"{log} is empty")
        r.verify()
    finally:
        r.cleanup()


def test_restart_command_restarts_a_worker():
    r = Run("rs", step_ms=60)
    try:
        r.start()
        st = r.wait_running()
        old = r.worker(st, "drafter.0")["pid"]
        msg = r.cli("restart", "drafter.0").stdout
        check("SIGTERM" in msg, msg)
        st = r.wait_for(lambda s: r.worker(s, "drafter.0")["restarts"] == 1 and
                        r.worker(s, "drafter.0")["state"] == "running", "drafter.0 restarted")
        d = r.worker(st, "drafter.0")
        check(d["pid"] != old, f"drafter.0 has the same pid {old} after a restart")
        check(d["last_exit"] == "exit code 0", f"a restart is a graceful stop: {d}")
        check(d["incarnation"] == r.worker(st, "target.0")["incarnation"] + 1, f"incarnation +1 per restart: {st}")
        r.expect_exit(0)
        r.verify()
    finally:
        r.cleanup()


def epoch_rows(verify_output):
    # EPOCH TOTAL EXACTLY-ONCE REJECTED MISSING MORE-THAN-ONCE: "  0   300   300   0   0   0"
    return [list(map(int, l.split())) for l in verify_output.splitlines() if re.fullmatch(r"\s*(\d+\s+){5}\d+\s*", l)]


def test_stop_checkpoints_keeps_what_is_ready_and_exits_0():
    # keep_ring: the next run shows how many READY slots the stop left: the drafter finished its
    # step and checkpointed; what the targets had written waits in the ring for the next run.
    r = Run("stop", step_ms=50, samples=300, run_extra="keep_ring = true")
    try:
        r.start()
        r.wait_running()
        r.wait_for(lambda s: s["ring"]["ready"] >= 2 and s["drafter"]["step"], "a full ring and a few steps")
        res = r.cli("stop")
        check("supervisor exit code 0" in res.stdout, res.stdout)
        r.expect_exit(0)
        check("stop requested" in r.output(), r.output())
        check(r.shm_exists() == (True, True), "keep_ring = true keeps the ring and the ledger")
        # What the stop trained is in the checkpoint exactly once; the rest is not trained yet (not
        # finished: exit 3, not FAILED), none doubled.
        res = r.verify(expect=3)
        check("not finished" in res.stdout and "FAILED" not in res.stdout, res.stdout)
        rows = epoch_rows(res.stdout)
        check(len(rows) == 2 and all(row[5] == 0 for row in rows) and sum(row[4] for row in rows) > 0, str(rows))

        r.start()
        r.expect_exit(0)
        m = re.search(r"re-attached to ring '[^']+': (\d+) READY slots kept", r.output())
        check(m and int(m.group(1)) > 0, "the stop kept the READY slots for the next run:\n" + r.output())
        r.verify()
    finally:
        r.cleanup()


def test_stop_without_keep_ring_removes_the_ring_and_the_next_run_resumes():
    r = Run("stop2", step_ms=60)
    try:
        r.start()
        r.wait_for(lambda s: (s["drafter"]["step"] or 0) >= 6, "a checkpoint (step >= 5)")
        r.cli("stop")
        r.expect_exit(0)
        check(r.shm_exists() == (False, False), "a graceful stop removes ring and ledger without keep_ring")
        r.start()
        r.expect_exit(0)
        check("marked durable" in r.output(), "a new ledger takes what the checkpoint holds:\n" + r.output())
        r.verify()
    finally:
        r.cleanup()


def test_stop_now_kills_and_keeps_the_ring():
    r = Run("now", step_ms=60)
    try:
        r.start()
        st = r.wait_running()
        pids = [w["pid"] for w in st["workers"]]
        res = r.cli("stop", "--now")
        check("supervisor exit code 0" in res.stdout, res.stdout)
        r.expect_exit(0)
        check("SIGKILL" in r.output(), r.output())
        check(r.shm_exists() == (True, True), "stop --now keeps the ring and the ledger")
        check(all(not os.path.exists(f"/proc/{p}") or open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
                  for p in pids), "every worker is dead")
        r.start()
        r.expect_exit(0)
        r.verify()
    finally:
        r.cleanup()


def test_sigint_is_graceful_and_a_second_sigint_immediate():
    r = Run("int", step_ms=60, samples=300)
    try:
        r.start()
        r.wait_running()
        r.proc.send_signal(signal.SIGINT)
        r.expect_exit(0)
        check("interrupted (SIGINT): stopping gracefully" in r.output(), r.output())

        r.start()
        r.wait_for(lambda s: s["ring"]["ready"] >= 2, "READY slots to drain")
        r.proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
        r.proc.send_signal(signal.SIGINT)
        r.expect_exit(130)
        check(r.shm_exists() == (True, True), "an immediate stop keeps the ring and the ledger")
        r.start()
        r.expect_exit(0)
        r.verify()
    finally:
        r.cleanup()


def test_status_says_which_side_waits_and_what_to_change():
    # A slow drafter: the targets fill the ring and wait for free slots.
    r = Run("bald", step_ms=120, samples=300)
    try:
        r.start()
        st = r.wait_for(lambda s: s["balance"]["bottleneck"] == "drafters", "targets waiting on a full ring", timeout=30)
        check(st["balance"]["targets_wait"] > 0.5 and st["balance"]["drafters_wait"] < 0.1, str(st["balance"]))
        text = r.cli("status").stdout
        check("balance: targets wait" in text and "add drafter GPUs" in text, text)
        r.cli("stop")
        r.expect_exit(0)
    finally:
        r.cleanup()
    # Slow targets: the drafter waits for data.
    r = Run("balt", step_ms=0, samples=300, env={"HSRING_SYNTH_WRITE_MS": "150"})
    try:
        r.start()
        st = r.wait_for(lambda s: s["balance"]["bottleneck"] == "targets", "the drafter waiting for data", timeout=30)
        check("add target GPUs" in st["balance"]["advice"], str(st["balance"]))
        r.cli("stop")
        r.expect_exit(0)
    finally:
        r.cleanup()


if __name__ == "__main__":
    main([test_run_completes_and_verifies, test_restart_command_restarts_a_worker, test_stop_checkpoints_keeps_what_is_ready_and_exits_0,
          test_stop_without_keep_ring_removes_the_ring_and_the_next_run_resumes, test_stop_now_kills_and_keeps_the_ring,
          test_sigint_is_graceful_and_a_second_sigint_immediate, test_status_says_which_side_waits_and_what_to_change])
