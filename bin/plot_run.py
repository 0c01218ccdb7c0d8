"""Plot an hsring run from RUN_DIR/metrics.jsonl (see bin/plot-run).

metrics.jsonl is appended to by every incarnation of the master drafter. A drafter killed after its
last checkpoint leaves rows of steps that were rolled back: its successor resumes from that
checkpoint and trains those steps again. read_metrics() keeps only the rows that survived (what
the final weights went through); bench/gpu/summarize_run.py, bin/demo and tests/e2e use it too.
"""
import json
import sys
from pathlib import Path


def surviving(records):
    """The rows of `records` (metrics.jsonl's objects, in file order) that survived, and where the
    run resumed: (rows, evals, resumes).

    A row {"resume": {"step": S, "incarnation": I}} says incarnation I started from the checkpoint
    of step S: every earlier row of a step after S was rolled back. Files without such rows (written
    before drafters wrote them): a step row whose "incarnation" differs from the row before it
    starts a new incarnation, which resumed before its first logged step (exact with [train]
    log_every = 1). Held-out evaluations ({"step": S, "eval": {...}}) of rolled-back steps go too;
    a step that still appears twice keeps its last row. A resume before the first step row (a run
    that starts from a checkpoint) is not listed."""
    rows, evals, resumes = [], [], []
    current = None  # the incarnation of the last row

    def roll_back(step, incarnation, inferred):
        nonlocal rows, evals
        dropped = sum(1 for r in rows if r["step"] > step) + sum(1 for e in evals if e["step"] > step)
        if rows or evals:
            resumes.append({"step": step, "incarnation": incarnation, "dropped": dropped, "inferred": inferred})
        rows = [r for r in rows if r["step"] <= step]
        evals = [e for e in evals if e["step"] <= step]

    for r in records:
        if "resume" in r:
            res = r["resume"]
            roll_back(res["step"], res.get("incarnation"), False)
            current = res.get("incarnation", current)
        elif "eval" in r:
            evals.append(r)
        elif "spec" in r:
            continue  # tau of a committed checkpoint (read_spec): never rolled back
        elif "step" in r:
            inc = r.get("incarnation")
            if inc is not None and current is not None and inc != current:
                roll_back(r["step"] - 1, inc, True)
            if inc is not None:
                current = inc
            rows.append(r)

    def last_per_step(xs):
        by_step = {}
        for x in xs:
            by_step[x["step"]] = x
        return [by_step[s] for s in sorted(by_step)]

    return last_per_step(rows), last_per_step(evals), resumes


def read_metrics(run_dir):
    """surviving() of RUN_DIR/metrics.jsonl."""
    with open(Path(run_dir) / "metrics.jsonl") as f:
        return surviving(json.loads(line) for line in f if line.strip())


def read_spec(run_dir):
    """The real tau measurements of RUN_DIR/metrics.jsonl ({"step": S, "spec": {"tau", ...}}: target.0
    during training, on committed checkpoints; the supervisor at the end, "final": true), one per
    step (the last), in step order."""
    by_step = {}
    with open(Path(run_dir) / "metrics.jsonl") as f:
        for line in f:
            if '"spec"' in line:
                r = json.loads(line)
                if isinstance(r.get("spec"), dict):
                    by_step[r["step"]] = r
    return [by_step[s] for s in sorted(by_step)]


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: bin/plot-run RUN_DIR [OUT.png]", file=sys.stderr)
        return 2
    run = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else run / "plot.png"
    rows, evals, resumes = read_metrics(run)
    if not rows:
        print(f"{run}/metrics.jsonl has no steps yet", file=sys.stderr)
        return 1
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    step = [r["step"] for r in rows]
    window = max(1, len(rows) // 40)

    def smooth(xs):
        """Trailing mean over `window` steps: per-step values of small batches are noisy."""
        out, acc = [], 0.0
        for i, x in enumerate(xs):
            acc += x
            if i >= window:
                acc -= xs[i - window]
            out.append(acc / min(i + 1, window))
        return out

    def curve(axis, ys, label=None):
        axis.plot(step, ys, alpha=0.25, linewidth=0.8)
        axis.plot(step, smooth(ys), label=label, color=axis.lines[-1].get_color())
    fig, ax = plt.subplots(2, 4, figsize=(20, 8))
    dropped = sum(r["dropped"] for r in resumes)
    resumed = f"{len(resumes)} resume{'' if len(resumes) == 1 else 's'}"
    fig.suptitle(f"hsring run {run.name}: {len(rows)} logged steps, {len(evals)} held-out evaluations"
                 + (f"; {resumed} from a checkpoint ({dropped} rolled-back rows left out)" if resumes else ""))
    curve(ax[0][0], [r["loss"] for r in rows], label="training")
    ax[0][0].set_title(f"loss (line: mean of {window} steps)")
    if evals:
        ax[0][0].plot([e["step"] for e in evals], [e["eval"]["loss"] for e in evals], "o-", color="black",
                      label="held-out")
    n = len(rows[-1]["acc"])
    for k in range(n):
        ax[0][1].plot(step, smooth([r["acc"][k] if k < len(r["acc"]) else 0.0 for r in rows]), label=f"pos {k + 1}")
    ax[0][1].set_title(f"accuracy per block position (mean of {window} steps)")
    ax[0][1].legend(fontsize=7, ncol=2)
    curve(ax[0][2], [r["accept_len"] for r in rows], label="training")
    ax[0][2].set_title("acceptance length: estimate and real tau")
    if evals:
        ax[0][2].plot([e["step"] for e in evals], [e["eval"]["accept_len"] for e in evals], "o-", color="black",
                      label="held-out")
    spec = read_spec(run)
    if spec:
        ax[0][2].plot([x["step"] for x in spec], [x["spec"]["tau"] for x in spec], "s-", color="red",
                      label="real tau (spec-decode with the target)")
    if evals or spec:
        ax[0][2].legend()
    ax[0][3].plot(step, [r["lr"] for r in rows])
    ax[0][3].set_title("learning rate")
    curve(ax[1][0], [r["tokens_per_s"] for r in rows])
    ax[1][0].set_title("drafter tokens/s")
    ax[1][1].plot(step, [r["data_wait_ms"] / max(r["step_ms"], 1e-9) for r in rows], label="data wait / step")
    ax[1][1].plot(step, [r["h2d_ms"] / max(r["step_ms"], 1e-9) for r in rows], label="H2D / step")
    ax[1][1].set_title("fraction of step time")
    ax[1][1].legend()
    for key in ("free", "writing", "ready", "reading"):
        ax[1][2].plot(step, [r["ring"][key] for r in rows], label=key)
    ax[1][2].set_title("ring slots by state")
    ax[1][2].legend()
    if evals:
        n_eval = len(evals[-1]["eval"]["acc"])
        for k in range(n_eval):
            ax[1][3].plot([e["step"] for e in evals], [e["eval"]["acc"][k] for e in evals], "o-", label=f"pos {k + 1}")
        ax[1][3].legend(fontsize=7, ncol=2)
    ax[1][3].set_title("held-out accuracy per block position" if evals else "held-out: no [data] eval_path")
    # Where a drafter restarted from a checkpoint: the steps after it were trained again.
    for a in ax.flat:
        for i, res in enumerate(resumes):
            a.axvline(res["step"], color="red", linestyle="--", linewidth=0.8, alpha=0.6,
                      label="resumed from a checkpoint" if i == 0 and a is ax[0][0] else None)
        a.set_xlabel("step")
        a.grid(alpha=0.3)
    if evals or resumes:
        ax[0][0].legend()
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"wrote {out}" + (f" ({resumed} marked)" if resumes else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
