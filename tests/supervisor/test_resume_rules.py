"""Settings changed between a stop (or a completed run) and the next `hsring run` of the same run
directory (src/supervisor/resume_rules.hpp): a step size, an epoch count or the number of drafter
ranks is re-planned from the checkpoint and the run completes exactly once; a learning rate is applied with a line saying so;
a drafter's block size, its mask token and the ring's slot_tokens are refused before anything
starts, naming the key, both values and the way on; set back, the run resumes and completes."""
import json
import os
import re
import signal

from harness import Run, check, main


def stop_after_checkpoint(r, step=6):
    r.start()
    r.wait_for(lambda s: (s["drafter"]["step"] or 0) >= step, f"step {step} (a checkpoint at 5)")
    r.cli("stop")
    r.expect_exit(0)


def change(r, epochs=2, **extra):
    for k, v in extra.items():
        setattr(r, k, v)
    r.write_config(epochs=epochs)


def complete_and_verify(r, what):
    r.start()
    r.expect_exit(0, timeout=120)
    out = r.output()
    check("complete (verified)" in out, f"{what}: the run does not complete:\n{out}")
    r.verify()
    return out


def test_tokens_per_step_up_and_down_is_replanned():
    for before, after in ((128, 256), (256, 128)):
        r = Run(f"tps{before}", step_ms=30, train_extra=f"tokens_per_step = {before}")
        try:
            stop_after_checkpoint(r)
            change(r, train_extra=f"tokens_per_step = {after}")
            out = complete_and_verify(r, f"tokens_per_step {before} -> {after}")
            check(f"[train] tokens_per_step (slots per rank): {before // 128} -> {after // 128}: the steps after the "
                  "checkpoint are planned again" in out, out)
            check("400 of 400 sample passes trained" in out, out)
        finally:
            r.cleanup()


def test_more_epochs_after_a_completed_run_whose_last_step_was_short():
    # 2 slots a step; the plan's slot count is odd, so the last step of epoch 1 trains one slot and
    # the second epoch's first slot must start the next step (it was skipped before the rebase).
    r = Run("epochs", step_ms=10, samples=150, epochs=1, train_extra="tokens_per_step = 256")
    try:
        out = complete_and_verify(r, "1 epoch")
        slots = [int(m) for m in re.findall(r"plan: (\d+) slots on this machine", out)]
        check(slots and slots[0] % 2 == 1, f"the test needs an odd plan (got {slots}):\n{out}")
        change(r, epochs=2)
        out = complete_and_verify(r, "epochs 1 -> 2 after completion")
        check("[data] epochs: 1 -> 2" in out and "planned again from plan slot" in out, out)
        check("300 of 300 sample passes trained" in out, out)
        # Run again: complete already, nothing to do, exit 0 (it said NOT complete on every re-run).
        out = complete_and_verify(r, "a completed run started again")
    finally:
        r.cleanup()


def test_lr_is_applied_with_a_line_saying_so():
    r = Run("lr", step_ms=30)
    try:
        stop_after_checkpoint(r)
        change(r, train_extra="lr = 0.001")
        out = complete_and_verify(r, "lr changed")
        check("changed since the checkpoint of step" in out and "[train] lr: 0.0006 -> 0.001: applied from the next "
              "step" in out, out)
    finally:
        r.cleanup()


def test_drafter_and_packing_changes_are_refused_and_resume_when_set_back():
    r = Run("refuse", step_ms=30)
    try:
        stop_after_checkpoint(r)
        for extra, want in (({"drafter_extra": "block_size = 8\nmask_token_id = 500"},
                             ["[drafter] block_size was 16, now 8", "[drafter] mask_token_id was 511, now 500"]),
                            ({"slot_tokens": 256}, ["[ring] slot_tokens was 128, now 256"])):
            r.drafter_extra = extra.get("drafter_extra", "")
            r.slot_tokens = extra.get("slot_tokens", 128)
            r.write_config()
            r.start()
            r.expect_exit(2)  # a start-up error
            out = r.output()
            for w in want:
                check(w in out, f"expected '{w}' in:\n{out}")
            check("Set them back to resume it" in out and "--fresh --run-dir NEW_DIR" in out, out)
            check(r.shm_exists() == (False, False), "a refused resume makes no ring or ledger")
        r.drafter_extra, r.slot_tokens = "", 128
        r.write_config()
        complete_and_verify(r, "set back")
    finally:
        r.cleanup()


def sigkill_all(r):
    """The supervisor and every worker, SIGKILL: the ring and the ledger stay as they were."""
    pids = [w["pid"] for w in r.status()["workers"] if w["pid"]]
    r.proc.kill()
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    r.wait()


def test_drafter_count_2_1_3_across_a_sigkill_and_a_stop_is_replanned_exactly_once():
    # 768 tokens a step = 6 slots of 128: 3 per rank at 2 ranks, 6 at 1, 2 at 3 (the same step).
    two, one, three = '["cpu", "cpu"]', '["cpu"]', '["cpu", "cpu", "cpu"]'
    r = Run("dcount", drafters=two, step_ms=30, samples=300, train_extra="tokens_per_step = 768")
    try:
        # Two ranks, SIGKILLed past a checkpoint: the ring and the ledger stay, rank 1's plan slots
        # of the steps after it are CONSUMED in the ledger and no rank 1 comes back for them.
        r.start()
        r.wait_for(lambda s: (s["drafter"]["step"] or 0) >= 8, "step 8 (a checkpoint at 5)")
        sigkill_all(r)
        r.write_config(drafters=one)
        r.start()
        st = r.wait_for(lambda s: (s["drafter"]["step"] or 0) >= 13, "step 13 with one drafter")
        # hsring status: the gang's size and its re-formation from 2 ranks to 1.
        check(st["gang"]["world"] == 1 and any(x.get("world_before") == 2 and x["world"] == 1
                                               for x in st["gang"]["reformations"]), f"{st['gang']}")
        text = r.cli("status").stdout
        check(re.search(r"gang: 1 drafter ranks; formed \d+ time\(s\) in this run dir: .*at step \d+ \(2 -> 1 ranks, ", text),
              text)
        r.cli("stop")
        r.expect_exit(0)
        out = r.output()
        check("[topology] drafters (count): 2 -> 1: the steps after the checkpoint are planned again" in out, out)
        check("1 drafter rank(s) on this machine, 2 before" in out, out)
        m = re.search(r"drafter ranks >= 1 of an earlier run on this machine: \d+ samples made durable, (\d+) re-issued; "
                      r"their 1 train log\(s\) resume at step", out)
        check(m and int(m.group(1)) > 0, "rank 1's plan slots after the checkpoint are re-issued:\n" + out)
        check(re.search(r"plan: \d+ slots on this machine, 6 per step \(6 per rank\)", out), out)
        # Three ranks after a graceful stop (the ring is gone: the ledger is rebuilt from both
        # earlier ranks' train logs), to the end.
        r.write_config(drafters=three)
        out = complete_and_verify(r, "drafters 2 -> 1 -> 3")
        check("[topology] drafters (count): 1 -> 3" in out, out)
        check("(train logs of 2 drafter rank(s) in" in out, out)
        check(re.search(r"plan: \d+ slots on this machine, 6 per step \(2 per rank\)", out), out)
        check("600 of 600 sample passes trained" in out, out)
        v = r.verify().stdout
        check("ok: every sample is in the weights exactly once per epoch" in v, v)
        # metrics.jsonl: each re-formation's resume row (world size before and after, seconds since
        # the checkpoint), and the world size of every step row; the learning rate is a function of
        # the trained tokens alone, so the same at the same count whatever the ranks.
        rows = [json.loads(l) for l in open(os.path.join(r.run_dir, "metrics.jsonl"))]
        resumes = [x["resume"] for x in rows if "resume" in x]
        worlds = [(x.get("world_before"), x["world"]) for x in resumes]
        check((2, 1) in worlds and (1, 3) in worlds, f"resume rows {resumes}")
        check(all(x.get("since_checkpoint_s", -1) >= 0 for x in resumes if "world_before" in x), f"{resumes}")
        steps = {}
        for x in rows:
            if "step" in x and "lr" in x:
                steps[x["step"]] = x  # the last row of a step (rows rolled back by a resume are rewritten)
        check({x["world"] for x in steps.values()} == {1, 2, 3}, "steps ran at 1, 2 and 3 ranks")
        # An unresized run of the same config (2 ranks throughout): the same tokens and learning
        # rate at every step.
        u = Run("dcount2", drafters=two, step_ms=5, samples=300, train_extra="tokens_per_step = 768")
        try:
            complete_and_verify(u, "2 ranks throughout")
            ref = {}
            for x in (json.loads(l) for l in open(os.path.join(u.run_dir, "metrics.jsonl"))):
                if "step" in x and "lr" in x:
                    ref[x["step"]] = x
        finally:
            u.cleanup()
        check(sorted(ref) == sorted(steps), f"the same steps: {sorted(ref)} vs {sorted(steps)}")
        for k in ref:
            check(ref[k]["tokens_total"] == steps[k]["tokens_total"] and ref[k]["lr"] == steps[k]["lr"],
                  f"step {k}: unresized {ref[k]['tokens_total']} tokens lr {ref[k]['lr']}, resized "
                  f"{steps[k]['tokens_total']} tokens lr {steps[k]['lr']}")
    finally:
        r.cleanup()

if __name__ == "__main__":
    main([test_tokens_per_step_up_and_down_is_replanned, test_more_epochs_after_a_completed_run_whose_last_step_was_short,
          test_lr_is_applied_with_a_line_saying_so, test_drafter_and_packing_changes_are_refused_and_resume_when_set_back,
          test_drafter_count_2_1_3_across_a_sigkill_and_a_stop_is_replanned_exactly_once])
