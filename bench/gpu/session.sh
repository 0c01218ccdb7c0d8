#!/usr/bin/env bash
# bench/gpu/session.sh BUILD_DIR OUT_DIR — the GPU measurements of BENCHMARKS.md in one go, on
# the 2-GPU machine after bin/gpu-build and bin/hugepages:
#   1. hsring-bench target / drafter (LibTorch vs PyTorch eager, same run)
#   2. pipeline runs on long samples (bench/gpu/make_long_data.py), Qwen3-8B-shaped target(s) and
#      a 5-layer DFlash drafter at Qwen3-8B dims, 65,536-token slots:
#        p1: 1 target process on GPU0, drafter on GPU1
#        p3: 3 target processes sharing GPU0 (the seed topology squeezed), drafter on GPU1;
#            target.1 is SIGKILLed mid-run and restarted; the ledger must verify exactly once
#      each: trained tokens/s, target tokens/s, data-wait fraction, drafter peak GPU memory.
# Everything lands in OUT_DIR (summary.txt + session.tar.gz with logs and metrics).
# SKIP_MODEL_BENCH=1 / SKIP_PIPELINES=1 run one half; SAMPLES, KILL_AFTER_S, PIPELINE_LIMIT_S tune it.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
session_init "$@"

if [ "${SKIP_MODEL_BENCH:-0}" != 1 ]; then
  say "== hsring-bench target"
  timeout 300 "$build/bench/hsring-bench" target --python "$py" > "$work/bench_target.txt" 2>&1
  say "   exit $?: $(tail -n 1 "$work/bench_target.txt")"
  say "== hsring-bench drafter"
  timeout 300 "$build/bench/hsring-bench" drafter --python "$py" > "$work/bench_drafter.txt" 2>&1
  say "   exit $?: $(tail -n 1 "$work/bench_drafter.txt")"
fi

[ "${SKIP_PIPELINES:-0}" = 1 ] || "$py" bench/gpu/make_long_data.py runs/long.jsonl --samples "${SAMPLES:-400}" --length 3072

if [ "${SKIP_PIPELINES:-0}" != 1 ]; then
  pipeline p1 config/qwen3-8b-3t1d-squeezed.toml "" 0 "s/^targets = .*/targets = [0]/"
  pipeline p3 config/qwen3-8b-3t1d-squeezed.toml target.1 "${KILL_AFTER_S:-60}" "s/^targets = .*/targets = [0, 0, 0]/"
fi

tar -czf "$out/session.tar.gz" -C "$out" work
rm -rf "$work"
say "== done"
