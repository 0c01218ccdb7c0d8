#!/usr/bin/env bash
# bench/gpu/moe.sh BUILD_DIR OUT_DIR — issue 22 (MoE targets) on one H200:
#   A. hsring-bench target --preset qwen3-30b-a3b and --preset gpt-oss-20b: TOKENS (16,384) in
#      SEQS (8) packed sequences, the DFlash layers captured; in the same run PyTorch's baselines:
#      transformers' per-expert loop and grouped GEMMs (bench/python/target_eager.py --moe), and a
#      bf16 GEMM for the active-parameter TFLOP/s ratio
#   B. `hsring plan --measure` on config/qwen3-30b-a3b-1t1d.toml (bench/gpu/plan_check.sh, base
#      config only): the plan's target and drafter memory against the measured peaks
#   C. the 1-GPU pipeline config/qwen3-30b-a3b-1t1d.toml (target and drafter share GPU 0) on
#      SAMPLES (300) x 3,072-token samples, LIMIT_S (240) at most: ledger verify (exactly once),
#      finite losses, peaks
# SECTIONS=abc picks. OUT_DIR/moe/summary.txt.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
session_init "${1:-}" "${2:?usage: $0 BUILD_DIR OUT_DIR}/moe"
sections=${SECTIONS:-abc}
if [[ $sections == *a* ]]; then
  for preset in qwen3-30b-a3b gpt-oss-20b; do
    say "== hsring-bench target --preset $preset"
    timeout 400 "$build/bench/hsring-bench" target --preset "$preset" --tokens "${TOKENS:-16384}" --seqs "${SEQS:-8}" \
      --python "$py" > "$work/bench_target_$preset.txt" 2>&1
    say "   exit $?"
    grep -E "^target|eager .*ms/batch" "$work/bench_target_$preset.txt" | sed 's/^/   /' | tee -a "$out/summary.txt"
  done
fi
[ -f runs/long.jsonl ] || "$py" bench/gpu/make_long_data.py runs/long.jsonl --samples "${SAMPLES:-300}" --length 3072
if [[ $sections == *b* ]]; then
  say "== hsring plan --measure config/qwen3-30b-a3b-1t1d.toml"
  PLAN_BASE=config/qwen3-30b-a3b-1t1d.toml PLAN_CONFIGS=base PLAN_GPUS=1 PLAN_SECONDS=${PLAN_SECONDS:-10} \
    bench/gpu/plan_check.sh "$build" "$out/plan" > "$work/plan.log" 2>&1
  say "   exit $?"
  grep -E "^\|" "$out/plan/plan_check.md" | tee -a "$out/summary.txt"
fi
if [[ $sections == *c* ]]; then
  export PIPELINE_LIMIT_S=${LIMIT_S:-240}
  pipeline moe1 config/qwen3-30b-a3b-1t1d.toml "" 0
  "$py" - "$work/moe1.metrics.jsonl" <<'PY' | tee -a "$out/summary.txt"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if "loss" in r]
bad = [r["step"] for r in rows if r["loss"] is None or not math.isfinite(r["loss"])]
print(f"   moe1: {len(rows)} steps, non-finite loss in {len(bad)}; loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f}"
      if rows else "   moe1: no step rows")
PY
fi
tar -czf "$out/moe.tar.gz" -C "$out" work 2>/dev/null
say "== done"
