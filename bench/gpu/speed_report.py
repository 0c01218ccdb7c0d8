#!/usr/bin/env python3
"""speed_report.py RESULTS_DIR OUT_DIR --machine M --commit C --device D --elapsed S

bench/gpu/speed.sh's summary: reads each run's hsring-bench-drafter --json line (RUN.json) and its
exit status (RUN.status) from RESULTS_DIR, writes OUT_DIR/speed.json (all of them) and
OUT_DIR/speed.md (the table, phases and FLOP breakdown). Exit status 1 when a run failed (a run
skipped because speed.sh's time budget was spent is not a failure)."""
import argparse
import json
import pathlib

RUNS = [
    ("recipe", "recipe shape, eager baseline, phases"),
    ("recipe_adamw_torch", "recipe shape, the former optimizer step (clip_grad_norm_ + torch::optim::AdamW)"),
    ("recipe_recompute", "recipe shape, recompute layers"),
    ("recipe_fp8", "recipe shape, [train] matmul = fp8"),
    ("long16k", "one 16,384-token sample"),
    ("long16k_recompute", "one 16,384-token sample, recompute layers"),
    ("long32k", "one 32,768-token sample"),
    ("long32k_recompute", "one 32,768-token sample, recompute layers"),
]


def load(results, name):
    status_file = results / f"{name}.status"
    status = json.loads(status_file.read_text()) if status_file.exists() else {"exit": -1, "note": "not run"}
    result = None
    out = results / f"{name}.json"
    if out.exists():
        lines = [l for l in out.read_text().splitlines() if l.strip().startswith("{")]
        if lines:
            try:
                result = json.loads(lines[-1])
            except json.JSONDecodeError:
                result = None
    return status, result


def gib(b):
    return b / 2**30


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("out")
    ap.add_argument("--machine", default="?")
    ap.add_argument("--commit", default="?")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--elapsed", type=int, default=0)
    a = ap.parse_args()
    results, out = pathlib.Path(a.results), pathlib.Path(a.out)

    runs, failed = {}, False
    for name, _ in RUNS:
        status, result = load(results, name)
        runs[name] = {"status": status, "result": result}
        skipped = status.get("exit") == -1
        failed |= not skipped and (status.get("exit") != 0 or result is None)
    (out / "speed.json").write_text(json.dumps(
        {"machine": a.machine, "commit": a.commit, "device": a.device, "elapsed_s": a.elapsed, "runs": runs},
        indent=1) + "\n")

    md = [f"# hsring-bench drafter: speed and memory ({a.device})", "",
          f"Machine: {a.machine}. Commit: {a.commit}. Build and runs took {a.elapsed} s "
          "(bench/gpu/speed.sh; every number from one process per row).", "",
          "| run | samples x tokens | recompute | samples/s | ms/step | TFLOP/step | TFLOP/s | GEMM TFLOP/s "
          "| ratio to GEMM | peak GiB | eager samples/s (peak GiB) | vs eager | loss |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, what in RUNS:
        st, r = runs[name]["status"], runs[name]["result"]
        if r is None:
            why = st.get("note") or f"exit {st.get('exit')} (see {name}.log in logs.tar.gz)"
            md.append(f"| {name}: {what} | — | — | {why} | | | | | | | | | |")
            continue
        e = r.get("eager")
        eager = f"{e['samples_per_s']:.2f} ({e['peak_gib']:.1f})" if e else "—"
        vs = f"{e['ratio']:.2f}" if e else "—"
        g = r["gemm"]
        md.append(f"| {name}: {what} | {r['samples']} x {r['seq_len']} | {r['recompute']} | {r['samples_per_s']:.2f} "
                  f"| {r['step_s'] * 1e3:.0f} | {r['flops']['total'] / 1e12:.2f} | {r['tflops_per_s']:.1f} "
                  f"| {g['tflops_per_s']:.1f} ({g['m']}x{g['k']}x{g['n']} {g['dtype']}) | {r['gemm_ratio']:.2f} "
                  f"| {gib(r['peak_allocated_bytes']):.2f} | {eager} | {vs} | {r['loss']:.3f} |")
    md += ["", "loss: the last timed step's; runs of one shape train on the same seeded inputs and blocks, so "
           "recompute none and layers agree (exactly in fp32, to bf16 noise on the GPU).", "",
           "Phases (ms, each phase timed alone with the device synchronised around it):", "",
           "| run | sample blocks | forward (no grad) | forward + chunked CE | backward | AdamW |",
           "|---|---|---|---|---|---|"]
    for name, _ in RUNS:
        r = runs[name]["result"]
        if r and r.get("phases_ms"):
            p = r["phases_ms"]
            md.append(f"| {name} | {p['sample_blocks']:.1f} | {p['forward_no_grad']:.1f} | "
                      f"{p['forward_chunked_ce']:.1f} | {p['backward']:.1f} | {p['adamw']:.1f} |")
    md += ["", "FLOPs per step by part (TFLOP; src/model/drafter/dflash/flops.hpp says how they are counted):", "",
           "| run | layers | context k/v | attention | fc | LM head | total | attention over padded keys (not in total) |",
           "|---|---|---|---|---|---|---|---|"]
    for name, _ in RUNS:
        r = runs[name]["result"]
        if r:
            f = r["flops"]
            md.append(f"| {name} | " + " | ".join(f"{f.get(k, 0) / 1e12:.2f}" for k in
                                                  ("layers", "context_kv", "attention", "fc", "lm_head", "total",
                                                   "attention_padded")) + " |")
    (out / "speed.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
