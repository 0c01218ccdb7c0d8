"""Checks a run's metrics.jsonl as a user would read it: every surviving step row has a finite loss
and gradient norm (or says it was skipped as non-finite), and prints the loss at the start and end.

    python3 bench/gpu/check_metrics.py RUN_DIR/metrics.jsonl

Rows of a drafter incarnation that was rolled back (its steps after the checkpoint the next
incarnation resumed from) are left out: see bin/plot_run.py.
"""
import json
import math
import sys


def surviving(rows):
    """Step rows that are in the final weights' history: a {"resume": {"step": S}} line drops every
    earlier row with a step > S."""
    out = []
    for r in rows:
        if "resume" in r:
            s = r["resume"]["step"]
            out = [x for x in out if x["step"] <= s]
        elif "step_ms" in r:
            out.append(r)
    return out


def main() -> int:
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    steps = surviving(rows)
    bad = [r["step"] for r in steps
           if "skipped_nonfinite" not in r and not all(isinstance(r.get(k), (int, float)) and math.isfinite(r[k])
                                                       for k in ("loss", "grad_norm"))]
    skipped = [(r["step"], r["skipped_nonfinite"]) for r in steps if "skipped_nonfinite" in r]
    resumes = [r["resume"]["step"] for r in rows if "resume" in r]
    first, last = steps[:5], steps[-5:]
    mean = lambda rs: sum(r["loss"] for r in rs if isinstance(r.get("loss"), (int, float))) / max(1, len(rs))
    print(f"   metrics: {len(steps)} steps (resumed at {resumes}), non-finite rows {bad or 'none'}, skipped as "
          f"non-finite {skipped or 'none'}; loss {mean(first):.4f} (first 5) -> {mean(last):.4f} (last 5)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
