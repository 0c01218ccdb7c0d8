#!/usr/bin/env bash
# bench/gpu/attention_sweep.sh BUILD_DIR OUT_DIR — where the drafter step's time goes and which
# block-attention layout is fastest (issue 13), on one H200 after a build of hsring-bench-drafter:
#   1. a Kineto trace of 2 recipe-shape steps with the current defaults, summed by kernel kind
#      (bench/gpu/trace_summary.py): GEMM, attention forward/backward, elementwise, ...
#   2. hsring-bench drafter at the recipe shape (Qwen3-8B dims, 5 layers, 2 x 3,072 tokens, 512
#      anchors, block 16) for each attention layout in LAYOUTS ("kernel:group_blocks:key_pad",
#      see src/model/ops/attention.hpp), no eager baseline, each with the GEMM ratio of its own run
#   3. a trace of the fastest layout
# OUT_DIR/attention/: summary.txt (a line per run + the trace summaries), runs.jsonl (each run's
# JSON result line), logs.tar.gz. About 3 minutes. ITERS (default 5) and WARMUP (default 2) tune
# the steps; TRACE_DEFAULT=0 skips step 1.
# CPU smoke run of the plumbing: DEVICE=cpu bench/gpu/attention_sweep.sh build /tmp/sweep
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
session_init "${1:-}" "${2:?usage: $0 BUILD_DIR OUT_DIR}/attention"
: > "$out/runs.jsonl"
bench="$build/bench/model/hsring-bench-drafter"
[ -x "$bench" ] || { say "FAIL: $bench is missing: build it first (ninja -C $build bench/model/hsring-bench-drafter)"; exit 1; }
device=${DEVICE:-cuda}
if [ "$device" = cpu ]; then
  shape=(--preset tiny --layers 2 --seq-len 128 --samples 2 --anchors 8 --block 4 --chunk 64 --iters 2 --warmup 1)
else
  shape=(--preset qwen3-8b --layers 5 --seq-len 3072 --samples 2 --anchors 512 --block 16 --chunk 4096
         --iters "${ITERS:-5}" --warmup "${WARMUP:-2}")
fi
layouts=${LAYOUTS:-"auto:256:256 auto:128:256 auto:64:256 auto:32:256 auto:16:256 efficient:32:64"}
say "driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)"

summarize_trace() {  # summarize_trace NAME TRACE
  if [ -f "$2" ]; then
    "$py" "$root/bench/gpu/trace_summary.py" "$2" --steps 2 --top 15 > "$work/$1.trace.txt" 2>&1
    sed 's/^/   /' "$work/$1.trace.txt" | tee -a "$out/summary.txt"
    gzip -f "$2"  # kept (in logs.tar.gz) for a closer look: chrome://tracing or Perfetto read .json.gz
  else
    say "   (no trace written: see $work/$1.log)"
  fi
}

if [ "${TRACE_DEFAULT:-1}" = 1 ]; then
say "== 1. trace of the defaults"
timeout 150 "$bench" --device "$device" --no-eager --json "${shape[@]}" --trace "$work/default.trace.json" \
  > "$work/default.json" 2> "$work/default.log"
say "   exit $?: $(grep -E '^drafter .*ms/step' "$work/default.log" | tail -n 1)"
summarize_trace default "$work/default.trace.json"
fi

say "== 2. layouts (kernel:group_blocks:key_pad)"
best=""; best_sps=0
for l in $layouts; do
  IFS=: read -r kernel group pad <<< "$l"
  name="layout_${kernel}_${group}_${pad}"
  timeout 120 "$bench" --device "$device" --no-eager --json "${shape[@]}" --attention-kernel "$kernel" \
    --group "$group" --key-pad "$pad" > "$work/$name.json" 2> "$work/$name.log"
  rc=$?
  line=$(tail -n 1 "$work/$name.json")
  if [ $rc = 0 ] && [ -n "$line" ]; then
    echo "$line" >> "$out/runs.jsonl"
    read -r sps ms ratio attn peak < <(echo "$line" | "$py" -c "import json, sys
j = json.loads(sys.stdin.read())
print('%.3f %.1f %.3f %.1f %.2f' % (j['samples_per_s'], 1e3 * j['step_s'], j['gemm_ratio'],
      (j['flops']['attention'] + j['flops'].get('attention_padded', 0)) / 1e12, j['peak_allocated_bytes'] / 2**30))")
    say "   $l: $sps samples/s, $ms ms/step, GEMM ratio $ratio, attention $attn TFLOP computed, peak $peak GiB"
    if awk -v a="$sps" -v b="$best_sps" 'BEGIN {exit !(a > b)}'; then best=$l; best_sps=$sps; fi
  else
    say "   $l: FAILED (exit $rc): $(grep -v '^\s*$' "$work/$name.log" | tail -n 2 | tr '\n' ' ')"
  fi
done
say "   fastest: $best ($best_sps samples/s)"

if [ -n "$best" ] && [ "$best" != "auto:256:256" ]; then
  say "== 3. trace of the fastest layout ($best)"
  IFS=: read -r kernel group pad <<< "$best"
  timeout 150 "$bench" --device "$device" --no-eager --json "${shape[@]}" --attention-kernel "$kernel" \
    --group "$group" --key-pad "$pad" --trace "$work/best.trace.json" > "$work/best.json" 2> "$work/best.log"
  say "   exit $?"
  summarize_trace best "$work/best.trace.json"
fi
tar -czf "$out/logs.tar.gz" -C "$work" . 2>/dev/null && rm -rf "$work"
