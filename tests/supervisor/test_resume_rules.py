"""Settings changed between a stop (or a completed run) and the next `hsring run` of the same run
directory (src/supervisor/resume_rules.hpp): a step size or an epoch count is re-planned from the
checkpoint and the run completes exactly once; a learning rate is applied with a line saying so;
a drafter's block size, its mask token and the ring's slot_tokens are refused before anything
starts, naming the key, both values and the way on; set back, the run resumes and completes."""
import re

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


if __name__ == "__main__":
    main([test_tokens_per_step_up_and_down_is_replanned, test_more_epochs_after_a_completed_run_whose_last_step_was_short,
          test_lr_is_applied_with_a_line_saying_so, test_drafter_and_packing_changes_are_refused_and_resume_when_set_back])
