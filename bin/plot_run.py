"""Plot an hsring run from RUN_DIR/metrics.jsonl (see bin/plot-run)."""
import json
import sys
from pathlib import Path


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: bin/plot-run RUN_DIR [OUT.png]", file=sys.stderr)
        return 2
    run = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else run / "plot.png"
    rows, evals = [], []
    with open(run / "metrics.jsonl") as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                if "resume" in r:
                    # A drafter resumed from the checkpoint of this step: rows of later steps
                    # written before were rolled back (their weights died with the drafter).
                    rows = [x for x in rows if x["step"] <= r["resume"]["step"]]
                    continue
                # Held-out evaluations are lines of their own ({"step": s, "eval": {...}}).
                (evals if "eval" in r else rows).append(r)
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
    fig.suptitle(f"hsring run {run.name}: {len(rows)} logged steps, {len(evals)} held-out evaluations")
    curve(ax[0][0], [r["loss"] for r in rows], label="training")
    ax[0][0].set_title(f"loss (line: mean of {window} steps)")
    if evals:
        ax[0][0].plot([e["step"] for e in evals], [e["eval"]["loss"] for e in evals], "o-", color="black",
                      label="held-out")
        ax[0][0].legend()
    n = len(rows[-1]["acc"])
    for k in range(n):
        ax[0][1].plot(step, smooth([r["acc"][k] if k < len(r["acc"]) else 0.0 for r in rows]), label=f"pos {k + 1}")
    ax[0][1].set_title(f"accuracy per block position (mean of {window} steps)")
    ax[0][1].legend(fontsize=7, ncol=2)
    curve(ax[0][2], [r["accept_len"] for r in rows], label="training")
    ax[0][2].set_title("expected acceptance length")
    if evals:
        ax[0][2].plot([e["step"] for e in evals], [e["eval"]["accept_len"] for e in evals], "o-", color="black",
                      label="held-out")
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
    for a in ax.flat:
        a.set_xlabel("step")
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
