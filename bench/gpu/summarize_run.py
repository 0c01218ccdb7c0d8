"""Summarises a pipeline run for BENCHMARKS.md: trained tokens/s, target tokens/s, data-wait
fraction of drafter step time, drafter peak GPU memory, restarts.

    python3 bench/gpu/summarize_run.py RUN_DIR SUPERVISOR_LOG
"""
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bin"))
from plot_run import read_metrics  # noqa: E402  (the rows that survived a drafter's restart)


def main() -> int:
    run, log = Path(sys.argv[1]), Path(sys.argv[2])
    # Steps only (held-out evaluations are lines of their own), and only the surviving rows: a
    # drafter killed after its last checkpoint logged steps that its successor trained again.
    rows, _, resumes = read_metrics(run) if (run / "metrics.jsonl").exists() else ([], [], [])
    if not rows:
        print("   no drafter steps recorded")
        return 1
    # The first steps include start-up (compile, allocator warm-up): report steady state too.
    steady = rows[len(rows) // 5:] or rows
    def rate(rs):
        ms = sum(r["step_ms"] for r in rs)
        return sum(r["tokens"] for r in rs) / (ms / 1000.0) if ms else 0.0
    wait = sum(r["data_wait_ms"] for r in steady) / max(1e-9, sum(r["step_ms"] for r in steady))
    h2d = sum(r["h2d_ms"] for r in steady) / max(1e-9, sum(r["step_ms"] for r in steady))
    peak = max(r["device_peak_bytes"] for r in rows)
    if resumes:
        print(f"   resumed from a checkpoint {len(resumes)}x (at step "
              f"{', '.join(str(r['step']) for r in resumes)}); {sum(r['dropped'] for r in resumes)} rolled-back "
              f"rows of metrics.jsonl not counted")
    print(f"   drafter: {len(rows)} steps, {rows[-1]['tokens_total']} tokens; trained tokens/s {rate(rows):.0f} "
          f"(steady, last 80% of steps: {rate(steady):.0f}); data wait {100 * wait:.2f}% of step time; "
          f"H2D {100 * h2d:.2f}% (overlapped); peak GPU memory {peak / 2**30:.2f} GiB; "
          f"samples/s {sum(r['samples'] for r in steady) / (sum(r['step_ms'] for r in steady) / 1000):.2f}")
    lrs = [r["lr"] for r in rows]
    print(f"   lr: step 1 {lrs[0]:.3g}, peak {max(lrs):.3g}, last step {lrs[-1]:.3g} ({len(lrs)} steps)")
    pauses = [r["checkpoint_pause_ms"] for r in rows if "checkpoint_pause_ms" in r]
    if pauses:
        print(f"   checkpoints: {len(pauses)} paused training {', '.join(f'{p:.0f}' for p in pauses)} ms "
              f"(max {max(pauses):.0f} ms; metrics.jsonl checkpoint_pause_ms)")
    text = log.read_text(errors="replace")
    written = re.findall(r"checkpoint step (\d+) (?:committed \(written in|written and committed in) ([\d.]+) ms", text)
    if written:
        print("   checkpoint writes: " + ", ".join(f"step {s} {float(ms) / 1000:.1f} s" for s, ms in written))
    delayed = re.findall(r"checkpoint of step (\d+) delayed: ([^;(]+)", text)
    if delayed:
        print(f"   checkpoints delayed {len(delayed)}x (not waited for): " + "; ".join(f"step {s}: {why.strip()}" for s, why in delayed))
    tgt = re.findall(r"\[(target\.\d+)\].*produced (\d+) slots, (\d+) samples, (\d+) tokens in ([\d.]+) s of compute "
                     r"\((\d+) tokens/s\)", text)
    total_tokens = sum(int(t[3]) for t in tgt)
    for name, slots, samples, tokens, busy, tps in tgt:
        print(f"   {name}: {slots} slots, {tokens} tokens, {busy} s compute -> {tps} tokens/s")
    m = re.search(r"complete after ([\d.]+) s", text)
    if m and total_tokens:
        print(f"   targets together: {total_tokens} tokens produced in {m.group(1)} s of run")
    restarts = re.findall(r"(\S+) \(pid \d+\) ended: (killed by SIGKILL|exit code \d+)", text)
    if restarts:
        print("   ended workers: " + ", ".join(f"{n} {why}" for n, why in restarts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
