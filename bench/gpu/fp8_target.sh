#!/usr/bin/env bash
# bench/gpu/fp8_target.sh BUILD_DIR OUT_DIR — issue 23 on one H200: the target's linear layers in
# FP8 ([target] weights = "fp8") and the drafter step at the peer's shape.
#   T. GPU tests: _scaled_mm with row scales against its emulation, Qwen3-8B dims vs bf16 (TESTS
#      picks more: a doctest -tc filter)
#   A. hsring-bench target --weights both (bf16, then FP8 on the same tokens, one run): tokens/s of
#      each, their ratio, the captured layers' relative error; at the default shape (16,384 tokens
#      in 8 sequences) and at --workload specforge (30 sequences of ~550 tokens; with a Kineto trace of
#      the FP8 forward, summed by trace_summary.py); WORKLOADS picks
#   D. hsring-bench drafter --workload specforge (2 x 768 tokens, 256 anchors) with a Kineto trace
#      of 2 steps, summed by bench/gpu/trace_summary.py
#   P. `hsring plan config/qwen3-8b-specforge-8gpu.toml --measure --gpus 8` (the peer's node: 768-token
#      samples, 256 anchors, 2 per drafter rank), with [target] weights bf16 and fp8: one target and
#      one drafter measured at the config's shapes, the recommended split of 8 GPUs and its samples/s
# SECTIONS=tadp picks (default tad). OUT_DIR/fp8/summary.txt; the trace as OUT_DIR/fp8/drafter_trace.tar.gz.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
session_init "${1:-}" "${2:?usage: $0 BUILD_DIR OUT_DIR}/fp8"
sections=${SECTIONS:-tad}
if [[ $sections == *t* ]]; then gpu_tests "$build" "${TESTS:-*FP8 target*}"; fi
if [[ $sections == *a* ]]; then
  for w in ${WORKLOADS:-default specforge}; do
    workload=${w#default}
    say "== hsring-bench target --weights both ${workload:+--workload $workload}"
    trace=()
    [ "$workload" = specforge ] && trace=(--trace "$work/target_trace.json")
    timeout 300 "$build/bench/hsring-bench" target --weights both --no-eager ${workload:+--workload $workload} \
      "${trace[@]}" > "$work/bench_target_${workload:-default}.txt" 2>&1
    say "   exit $?"
    grep -E "^target" "$work/bench_target_${workload:-default}.txt" | sed 's/^/   /' | tee -a "$out/summary.txt"
  done
  if [ -f "$work/target_trace.json" ]; then  # the FP8 target's forward, where its time goes
    "$py" bench/gpu/trace_summary.py "$work/target_trace.json" --top 20 > "$work/target_trace_summary.txt" 2>&1
    sed 's/^/   /' "$work/target_trace_summary.txt" | head -n 40 | tee -a "$out/summary.txt"
    tar -czf "$out/target_trace.tar.gz" -C "$work" target_trace.json && rm -f "$work/target_trace.json"
  fi
fi
if [[ $sections == *d* ]]; then
  say "== hsring-bench drafter --workload specforge --trace"
  timeout 300 "$build/bench/hsring-bench" drafter --workload specforge --no-eager --trace "$work/drafter_trace.json" \
    > "$work/bench_drafter.txt" 2>&1
  say "   exit $?"
  grep -vE "^\s*$" "$work/bench_drafter.txt" | tail -n 12 | sed 's/^/   /' | tee -a "$out/summary.txt"
  "$py" bench/gpu/trace_summary.py "$work/drafter_trace.json" --top 25 --host > "$work/trace_summary.txt" 2>&1
  sed 's/^/   /' "$work/trace_summary.txt" | head -n 80 | tee -a "$out/summary.txt"
  tar -czf "$out/drafter_trace.tar.gz" -C "$work" drafter_trace.json && rm -f "$work/drafter_trace.json"
fi
if [[ $sections == *p* ]]; then plan_specforge "$build" bf16 fp8; fi
