#!/usr/bin/env bash
# bench/gpu/target_speaks.sh BUILD_DIR OUT_DIR — issue 21 in the 1-GPU pipeline (one H200: target
# and drafter share GPU 0, config/qwen3-8b-1t1d.toml, SAMPLES (300) x 3,072-token samples):
#   A. no tau measurement, checkpoint every CKPT (10) steps          (the baseline)
#   B. the same with [eval] spec_prompts (SPEC_SAMPLES (8) of 8 prompts), spec_every = CKPT:
#      target.0 measures tau of committed checkpoints between its slots (on this shared GPU at most
#      5% of the wall clock, spec_probe.cpp); the cost is B / A - 1 paired by step (the same slot
#      trains at the same step in both runs), split by the steps that overlapped target.0's decoding
#      (the tau rows' wall-clock "windows" against the steps' "unix_time") and the others. Keep
#      CKPT >= 10: checkpoints every 5 steps paused training 6-12 s each on the H200
#   R. (SECTIONS with r) A again: the same pairing between two runs without tau is the noise floor
#   C. [data] responses = "target": the target answers every prompt (greedy, MAX_NEW (64) new
#      tokens, no stop token: preset weights) before capturing; ledger verify, finite losses, and
#      the target's generation rate from its log
# SECTIONS (abc) picks the runs. Each runs LIMIT_S (150) seconds, then `hsring stop`. OUT_DIR/target_speaks/summary.txt.
# MICRO=8192 trains each 16,384-token step in two micro-batches ([train] micro_batch_tokens): the
# drafter's allocated peak drops from 53.6 to 37.0 GiB (H100, 2026-12-07), a margin on an H100's
# 80 GB, where the run without it used at most 76.9 GiB (BENCHMARKS.md "Planner").
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
session_init "${1:-}" "${2:?usage: $0 BUILD_DIR OUT_DIR}/target_speaks"
# WORK (a folder on the machine) keeps A's rows between device calls: SECTIONS=ab, then SECTIONS=r.
work=${WORK:-$work}
mkdir -p "$work"
[ -x "$hs" ] || { say "FAIL: $hs is missing: build first"; exit 1; }
[ -f runs/long.jsonl ] || "$py" bench/gpu/make_long_data.py runs/long.jsonl --samples "${SAMPLES:-300}" --length 3072
"$py" bench/python/generate_hf.py make-prompts "$work/spec_prompts.jsonl" --count 8 --min-len 256 --max-len 512 --vocab 151000
export PIPELINE_LIMIT_S=${LIMIT_S:-150}
ckpt=${CKPT:-10}
shared=("s/^drafters = .*/drafters = [0]\nallow_shared_gpus = true/" "s/^checkpoint_every = .*/checkpoint_every = $ckpt/")
[ -n "${MICRO:-}" ] && shared+=("s/^tokens_per_step = .*/&\nmicro_batch_tokens = $MICRO/")
sections=${SECTIONS:-abc}
[[ $sections == *a* ]] && pipeline ts_a config/qwen3-8b-1t1d.toml "" 0 "${shared[@]}"
cat > "$work/paired.py" <<'PY'
# paired.py A B [LABEL] (A may be "-": B alone).
# Paired by step: the same slot is trained at the same step in A and B (invariant 10), and the
# target's prefill competes for the GPU at the same steps in both, so B[i] / A[i] isolates tau.
# Within B: the time B's steps that overlapped a decode window took beyond B's median step
# elsewhere, against all of B's step time (unpaired: also when A did not run).
import json, statistics, sys
def rows(path):
    return [json.loads(l) for l in open(path) if l.strip()] if path != "-" else []
a_rows, b_rows = rows(sys.argv[1]), rows(sys.argv[2])
label = sys.argv[3] if len(sys.argv) > 3 else "B / A"
windows = [w for r in b_rows if "spec" in r for w in r.get("windows", [])]
def steps(rs):
    return {r["step"]: r for r in rs if "step_ms" in r and "loss" in r}
a, b = steps(a_rows), steps(b_rows)
common = sorted(set(a) & set(b))[3:]  # past the first steps' warm-up
def ms(r):
    return r["step_ms"] - r.get("checkpoint_pause_ms", 0)
def overlaps(r):
    lo, hi = r["unix_time"] - r["step_ms"] / 1000.0, r["unix_time"]
    return any(w0 < hi and lo < w1 for w0, w1 in windows)
busy = [ms(b[s]) / ms(a[s]) for s in common if overlaps(b[s])]
idle = [ms(b[s]) / ms(a[s]) for s in common if not overlaps(b[s])]
if common:
    total = sum(ms(b[s]) for s in common) / sum(ms(a[s]) for s in common) - 1
    decoding = sum(w1 - w0 for w0, w1 in windows)
    span = b[common[-1]]["unix_time"] - b[common[0]]["unix_time"] + ms(b[common[0]]) / 1000.0
    print(f"   paired by step ({len(common)} steps): {label} - 1 = {100 * total:+.2f}% of the drafter's step time "
          f"(checkpoint pauses excluded); {len(windows)} decode windows, {decoding:.1f} s of {span:.0f} s "
          f"({100 * decoding / span:.1f}%)")
    for name, xs in (("overlapping decoding", busy), ("not overlapping", idle)):
        if xs:
            print(f"     steps {name}: {len(xs)}, median {label} {statistics.median(xs):.3f}, mean {statistics.mean(xs):.3f}")
own = sorted(b)[3:]
b_busy, b_idle = [ms(b[s]) for s in own if overlaps(b[s])], [ms(b[s]) for s in own if not overlaps(b[s])]
if b_busy and b_idle:
    extra = sum(x - statistics.median(b_idle) for x in b_busy)
    print(f"   within B: {len(b_busy)} steps overlapped decoding (median {statistics.median(b_busy):.0f} ms) vs "
          f"{len(b_idle)} others (median {statistics.median(b_idle):.0f} ms): {extra:.0f} ms extra = "
          f"{100 * extra / sum(ms(b[s]) for s in own):+.2f}% of B's step time")
PY
if [[ $sections == *b* ]]; then
  pipeline ts_b config/qwen3-8b-1t1d.toml "" 0 "${shared[@]}" \
    '$a [eval]' "\$a spec_prompts = \"$work/spec_prompts.jsonl\"" "\$a spec_every = $ckpt" \
    "\$a spec_samples = ${SPEC_SAMPLES:-8}"
  say "   tau rows (B): $(grep -c '"spec"' "$work/ts_b.metrics.jsonl" 2>/dev/null) in metrics.jsonl"
  grep -h "tau " "$work/ts_b.logs/target.0.log" 2>/dev/null | tail -n 5 | sed 's/^/     /' | tee -a "$out/summary.txt"
  a_rows="$work/ts_a.metrics.jsonl"; [ -f "$a_rows" ] || a_rows=-
  "$py" "$work/paired.py" "$a_rows" "$work/ts_b.metrics.jsonl" | tee -a "$out/summary.txt"
  # Each measurement against issue 35's bound: decoded within 60 s, and its row written within 60 s
  # of the drafter's step that committed the checkpoint it measures.
  "$py" - "$work/ts_b.metrics.jsonl" <<'PY' | tee -a "$out/summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
done = {r["step"]: r["unix_time"] for r in rows if "loss" in r and "unix_time" in r}
for r in rows:
    if "spec" not in r or r["spec"].get("final"):
        continue
    s, end = r["spec"], r["windows"][-1][1]
    late = f", row {end - done[r['step']]:.1f} s after step {r['step']} ended" if r["step"] in done else ""
    print(f"   tau {s['tau']:.3f} at step {r['step']}: {s['prompts']} prompts x {s['new_tokens'] // max(s['prompts'], 1)} "
          f"new tokens in one batch, {s['verify_steps']} verify steps (all rows), {s['seconds']:.2f} s of decoding{late}")
PY
fi
# R: A again (no tau in either run): the same pairing shows the run-to-run noise the B / A cost sits in.
if [[ $sections == *r* ]]; then
  pipeline ts_a2 config/qwen3-8b-1t1d.toml "" 0 "${shared[@]}"
  "$py" "$work/paired.py" "$work/ts_a.metrics.jsonl" "$work/ts_a2.metrics.jsonl" "A2 / A (no tau in either)" |
    tee -a "$out/summary.txt"
fi
tar -czf "$out/target_speaks.tar.gz" -C "$(dirname "$work")" "$(basename "$work")" 2>/dev/null && rm -rf "$work"/*.logs "$work"/*.status.jsonl
[[ $sections == *c* ]] || exit 0
pipeline ts_c config/qwen3-8b-1t1d.toml "" 0 "${shared[@]}" 's/^epochs = .*/epochs = 1\nresponses = "target"/' \
  '$a [generate]' "\$a max_new_tokens = ${MAX_NEW:-64}" '$a stop_token_ids = []'
grep -h "generated\|answer" "$work/ts_c.logs/target.0.log" 2>/dev/null | tail -n 3 | sed 's/^/     /' | tee -a "$out/summary.txt"
"$py" - "$work/ts_c.metrics.jsonl" <<'PY' | tee -a "$out/summary.txt"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if "loss" in r]
bad = [r["step"] for r in rows if r["loss"] is None or not math.isfinite(r["loss"])]
print(f"   C: {len(rows)} steps, non-finite loss in {len(bad)}; loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f}")
PY
