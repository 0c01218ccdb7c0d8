#!/usr/bin/env bash
# bench/gpu/decode_engine.sh BUILD_DIR OUT_DIR — the decode engine (issue 35) on one GPU:
#   1. builds hsring's programs and the model tests into BUILD_DIR (as real_target.sh's section b)
#   2. the GPU test of the engine: steps captured as CUDA graphs equal forward_cached, spec-decode
#      and generate through them lossless
#   3. the Qwen3-8B preset at batch 1, bf16 (`hsring model spec-decode random:1`: a fresh 1-layer
#      drafter, tau ~1 on random weights, so every step is a full 16-token verify): plain decoding in
#      ms per token and the verify step in ms, through the engine's graphs and --eager (op by op),
#      beside the memory-bound limit measured in the same run (the weights a step reads over the
#      device's copy bandwidth). PROMPTS (4) random prompts of 256-512 tokens, MAX_NEW (64).
set -uo pipefail
build=${1:?usage: $0 BUILD_DIR OUT_DIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SECTIONS=b "$root/bench/gpu/real_target.sh" "$build" "${2:?usage: $0 BUILD_DIR OUT_DIR}" || exit 1
ninja -C "$build" tests/model/test_model > /tmp/ninja-tests.log 2>&1 || { tail -n 40 /tmp/ninja-tests.log; exit 1; }
source "$root/bench/gpu/lib.sh"
session_init "$build" "$2"
gpu_tests "$build" "decode*"
"$py" bench/python/generate_hf.py make-prompts "$work/prompts.jsonl" --count "${PROMPTS:-4}" --min-len 256 \
  --max-len 512 --vocab 151000
for mode in graphs eager; do
  flag=()
  [ $mode = eager ] && flag=(--eager)
  [ "${TRACE:-0}" = 1 ] && flag+=(--trace "$work/$mode.trace.json")
  say "== Qwen3-8B preset, batch 1, bf16, $mode"
  "$hs" model spec-decode random:1 --target preset:qwen3-8b --preset-seed 1 --device cuda --prompts "$work/prompts.jsonl" \
    --max-new-tokens "${MAX_NEW:-64}" "${flag[@]}" --json > "$out/qwen3-8b_$mode.json" 2> "$work/$mode.err"
  rc=$?
  [ $rc = 0 ] || { say "   exit $rc: $(tail -n 3 "$work/$mode.err")"; continue; }
  "$py" - "$out/qwen3-8b_$mode.json" <<'PY' | tee -a "$out/summary.txt"
import json, sys
j = json.load(open(sys.argv[1]))
plain, verify, limit = j["plain_ms_per_token"], j["verify_ms_per_step"], j.get("memory_bound_ms_per_token", 0)
print(f"   plain decoding {plain:.2f} ms per token ({j['target_tokens_per_s']:.1f} tokens/s); memory-bound limit "
      f"{limit:.2f} ms ({j['weight_bytes'] / 1e9:.2f} GB of weights at {j.get('copy_bytes_per_s', 0) / 1e12:.2f} TB/s copy "
      f"bandwidth): {plain / limit if limit else 0:.2f}x the limit")
print(f"   16-token verify step {verify:.2f} ms = {verify / plain:.2f}x a plain step; draft {j['draft_ms_per_step']:.2f} ms; "
      f"tau {j['tau']:.3f}, lossless {sum(p['lossless'] for p in j['prompts'])}/{len(j['prompts'])}")
PY
  if [ -f "$work/$mode.trace.json" ]; then
    "$py" bench/gpu/trace_summary.py "$work/$mode.trace.json" --steps 1 --top "${TOP:-40}" --host > "$out/$mode.trace.txt" 2>&1
    head -n 3 "$out/$mode.trace.txt" | sed 's/^/     /' | tee -a "$out/summary.txt"
    if [ $mode = graphs ]; then
      "$py" bench/gpu/trace_summary.py "$work/$mode.trace.json" --last-graph --top 25 > "$out/$mode.step.txt" 2>&1
      head -n 1 "$out/$mode.step.txt" | sed 's/^/     /' | tee -a "$out/summary.txt"
    fi
    if [ "${KEEP_TRACE:-0}" = 1 ]; then gzip -c "$work/$mode.trace.json" > "$out/$mode.trace.json.gz"; fi
    rm -f "$work/$mode.trace.json"
  fi
done
say "== done"
