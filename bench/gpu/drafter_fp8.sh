#!/usr/bin/env bash
# bench/gpu/drafter_fp8.sh BUILD_DIR OUT_DIR — issue 23 on one H200: the drafter step at the peer's
# shape (2 x 768 tokens, 256 anchors) with the frozen LM head in FP8 ([train] lm_head = "fp8").
#   T. GPU tests (TESTS: a doctest -tc filter; default the FP8 LM head's and the FP8 target's)
#   S. hsring-bench drafter --workload specforge, every variant in one process each, back to back:
#      bf16, --lm-head fp8, --matmul fp8, both (VARIANTS picks, ';'-separated); then the same at the
#      recipe shape (2 x 3,072, 512 anchors; RECIPE=0 skips)
#   C. --compare-matmul 200 at the peer's shape: the same drafter trained 200 steps on the same
#      learnable batches, all bf16 vs --compare-fp8 lm-head (COMPARE picks: lm-head, layers, both)
#   G. attention groups of GROUP_SIZES blocks (default "16 64 128"; 32 is the default above) with
#      G_ARGS (default --matmul fp8 --lm-head fp8) at the peer's shape
#   R. a Kineto trace of 2 steps with TRACE_ARGS (default --matmul fp8 --lm-head fp8), summed by
#      trace_summary.py
#   P. `hsring plan config/qwen3-8b-specforge-8gpu.toml --measure --gpus 8` with [target] weights
#      bf16 and fp8 (PLAN_WEIGHTS; the config's [train] lm_head as it is)
# SECTIONS=tscgrp picks (default tsc). COMPARE_LR: the --lr of the comparisons (default 1e-4).
# OUT_DIR/drafter_fp8/summary.txt, results as JSON lines in
# OUT_DIR/drafter_fp8/*.jsonl.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
session_init "${1:-}" "${2:?usage: $0 BUILD_DIR OUT_DIR}/drafter_fp8"
sections=${SECTIONS:-tsc}
bench="$build/bench/hsring-bench"
if [[ $sections == *t* ]]; then gpu_tests "$build" "${TESTS:-*FP8 LM head*,*FP8 target*}"; fi
# speed ARGS...: one hsring-bench drafter timing (its result line appended to speed.jsonl)
speed() {
  say "== hsring-bench drafter $*"
  timeout 240 "$bench" drafter --no-eager --json --warmup 4 --iters 10 "$@" > "$work/speed.json" 2> "$work/speed.err"
  say "   exit $?"
  grep -E "^drafter" "$work/speed.err" | sed 's/^/   /' | tee -a "$out/summary.txt"
  tail -n 1 "$work/speed.json" >> "$out/speed.jsonl"
}
if [[ $sections == *s* ]]; then
  IFS=';' read -r -a variants <<< "${VARIANTS:-;--lm-head fp8;--matmul fp8;--matmul fp8 --lm-head fp8}"
  shapes=(specforge)
  [ "${RECIPE:-1}" = 1 ] && shapes+=(recipe)
  for shape in "${shapes[@]}"; do
    for v in "${variants[@]}"; do
      args=()
      [ $shape = specforge ] && args+=(--workload specforge)
      # shellcheck disable=SC2206
      args+=($v)
      speed "${args[@]}"
    done
  done
fi
if [[ $sections == *c* ]]; then
  for what in ${COMPARE:-lm-head}; do
    say "== hsring-bench drafter --workload specforge --compare-matmul 200 --compare-fp8 $what --lr ${COMPARE_LR:-1e-4}"
    timeout 400 "$bench" drafter --workload specforge --compare-matmul 200 --compare-fp8 "$what" \
      --lr "${COMPARE_LR:-1e-4}" --json \
      > "$work/compare.json" 2> "$work/compare_$what.txt"
    say "   exit $?"
    grep -E "^compare-matmul|^  bf16|^  fp8" "$work/compare_$what.txt" | sed 's/^/   /' | tee -a "$out/summary.txt"
    tail -n 1 "$work/compare.json" >> "$out/compare.jsonl"
  done
fi
if [[ $sections == *g* ]]; then
  for g in ${GROUP_SIZES:-16 64 128}; do
    # shellcheck disable=SC2206
    gargs=(${G_ARGS:---matmul fp8 --lm-head fp8})
    speed --workload specforge "${gargs[@]}" --group "$g"
  done
fi
if [[ $sections == *r* ]]; then
  # shellcheck disable=SC2206
  targs=(${TRACE_ARGS:---matmul fp8 --lm-head fp8})
  say "== hsring-bench drafter --workload specforge ${targs[*]} --trace"
  timeout 300 "$bench" drafter --workload specforge --no-eager "${targs[@]}" --trace "$work/drafter_trace.json" \
    > "$work/bench_trace.txt" 2>&1
  say "   exit $?"
  grep -E "^drafter" "$work/bench_trace.txt" | sed 's/^/   /' | tee -a "$out/summary.txt"
  "$py" bench/gpu/trace_summary.py "$work/drafter_trace.json" --top 25 --host > "$work/trace_summary.txt" 2>&1
  sed 's/^/   /' "$work/trace_summary.txt" | head -n 80 | tee -a "$out/summary.txt"
  tar -czf "$out/drafter_trace.tar.gz" -C "$work" drafter_trace.json && rm -f "$work/drafter_trace.json"
fi
if [[ $sections == *p* ]]; then plan_specforge "$build" ${PLAN_WEIGHTS:-bf16 fp8}; fi
